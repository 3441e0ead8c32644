# A script that does not compile: Python's message, no frame of gorun's.
import torch

def broken(:
    pass
