# Puts a folder first on sys.path before `import torch`: under torchrun the
# torch found there is imported (here a stand-in, cases/shadow/torch); a
# pooled worker's torch was imported before; gorun starts it cold.
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "shadow"))

import torch  # noqa: E402

with open(os.path.join(os.environ.get("FIDELITY_OUT", "."), "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
    json.dump({"torch.stand_in": getattr(torch, "STAND_IN", False)}, f)
