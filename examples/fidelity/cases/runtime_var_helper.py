# For cases/runtime_var.py: a module that sets a variable read at import.
import os

os.environ["OMP_NUM_THREADS"] = "3"
