# Sets OMP_NUM_THREADS before `import torch`: torch sizes its thread pool
# from it as it is imported, so a pooled worker (torch imported before the
# script ran) would run with the launch's value; gorun starts it cold.
import os

os.environ["OMP_NUM_THREADS"] = "3"

import torch  # noqa: E402

import record  # noqa: E402

record.write({"torch.threads": torch.get_num_threads()})
