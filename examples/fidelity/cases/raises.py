# A script that raises: its traceback starts at its own frame.
import torch  # noqa: F401


def fails():
    raise ValueError("fidelity case")


fails()
