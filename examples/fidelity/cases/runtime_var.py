# Imports a module of its own folder that sets OMP_NUM_THREADS, before
# `import torch`: gorun's reading of the script cannot see it, so the
# first pooled run runs with the launch's value; the worker's own check
# sees the change, says so with the line, and the next attempt and later
# runs of this script start cold.
import os

import runtime_var_helper  # noqa: F401

import torch  # noqa: E402

import record  # noqa: E402

if os.environ.get("FIDELITY_CRASH_ATTEMPT") == os.environ.get("TORCHELASTIC_RESTART_COUNT"):
    raise SystemExit(3)
record.write({"torch.threads": torch.get_num_threads()})
