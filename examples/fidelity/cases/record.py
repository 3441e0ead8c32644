# What every case of the fidelity suite records, beside its own
# observations: imported by a case after its own `import torch`.
import json
import os
import sys

import torch


def spec(s):
    if s is None:
        return None
    return [s.name, s.origin, type(s.loader).__name__, s.parent, s.has_location, s.submodule_search_locations]


def write(observed):
    me = sys.modules["__main__"]
    o = {
        "sys.argv.count": len(sys.argv),
        "sys.argv.head": sys.argv[:3],
        "sys.argv.sum": sum(len(a) for a in sys.argv),
        "sys.orig_argv.count": len(getattr(sys, "orig_argv", [])),
        "sys.path0": sys.path[0],
        "main.__file__": getattr(me, "__file__", None),
        "main.__spec__": spec(getattr(me, "__spec__", None)),
        "main.__package__": getattr(me, "__package__", None),
        "cmdline.count": len(open("/proc/self/cmdline", "rb").read().split(b"\0")) - 1,
        "rng.torch_initial_seed~rank": torch.initial_seed(),
    }
    o.update(observed)
    with open(os.path.join(os.environ.get("FIDELITY_OUT", "."), "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
        json.dump(o, f, indent=1, sort_keys=True, default=repr)
