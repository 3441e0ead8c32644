# A folder (or a zip file) holding __main__.py, given as the script.
import os
import sys

import torch  # noqa: F401

sys.path.append(os.environ["FIDELITY_CASES"])  # for record.py, after the import
import record  # noqa: E402

record.write({})
