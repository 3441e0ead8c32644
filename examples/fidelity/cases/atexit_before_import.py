# Registers an atexit handler before `import torch`: under torchrun the
# handlers torch registers as it is imported run before it (the last
# registered runs first), so at its run torch.utils.data's exit flag is
# set; in a pooled worker it would run before them; gorun starts it cold.
import atexit
import json
import os


def at_exit():
    import torch.utils.data._utils as u

    with open(os.path.join(os.environ.get("FIDELITY_OUT", "."), "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
        json.dump({"atexit.torch_ran_first": bool(u.python_exit_status)}, f)


atexit.register(at_exit)

import torch  # noqa: E402,F401
