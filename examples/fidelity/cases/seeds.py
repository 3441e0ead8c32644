# What each process draws for itself as it starts: different on every
# rank, as under torchrun; and hash() with PYTHONHASHSEED set in the
# launch environment, the same everywhere.
import os
import random

import numpy
import torch

import record

record.write({
    "rng.torch_rand~rank": torch.rand(2).tolist(),
    "rng.numpy_legacy~rank": int(numpy.random.randint(1 << 30)),
    "rng.python_random~rank": random.random(),
    "rng.dropout~rank": torch.nn.functional.dropout(torch.ones(16), 0.5).tolist(),
    "rng.dataloader~rank": [int(b) for b in torch.utils.data.DataLoader(list(range(2)), num_workers=1, generator=None,
                                                                          worker_init_fn=None, collate_fn=lambda _: torch.initial_seed() % 100003)],
    # With PYTHONHASHSEED set, the same on every rank and in every run.
    ("rng.hash_seeded" if os.environ.get("PYTHONHASHSEED") else "rng.hash~rank"): hash("gorun fidelity"),
})
