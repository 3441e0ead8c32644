"""Where torchrun's own start goes, once torch.distributed.run is imported.

A warm standby torchrun (gorun's --warm-restart) has imported
torch.distributed.run before the restart; what it still pays after the
hand-off is torchrun's main(): argument parsing, the rendezvous, the
agent, the workers' spawn. This runs that main() in-process, under
cProfile, with `--nproc-per-node 1 --no-python true` (the worker is
/bin/true), and prints main()'s wall time, the modules it imported
lazily, and the functions with the most cumulative time.

    usage: python3 docs/bench/torchrun_profile.py [PORT]

PREIMPORT=1 imports first what gorun's standby imports beside
torch.distributed.run (internal/agent/warm.py, _prepay_torchrun: the rendezvous
handlers and the IDNA codec), to see what that takes off main();
STANDALONE=1 runs `--standalone` (the c10d rendezvous) instead of a
static one; PROFILE=0 prints the wall time only (no profiler's cost).
"""
import cProfile
import io
import pstats
import sys
import time

import torch
import torch.distributed.run as run
import os
import importlib

def _standby_modules():
    # The list as the standby has it (internal/agent/warm.py runs when imported,
    # so its constant is read, not run).
    import ast
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "internal", "agent", "warm.py")
    with open(path) as f:
        for node in ast.parse(f.read()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TORCHRUN_LAZY_MODULES" for t in node.targets):
                return ast.literal_eval(node.value)
    raise SystemExit("TORCHRUN_LAZY_MODULES not found in " + path)


if os.environ.get("PREIMPORT") == "1":
    for name in _standby_modules():
        importlib.import_module(name)
profile = os.environ.get("PROFILE") != "0"

from torch.distributed.elastic.multiprocessing import api as _api

if _api.Std.from_str("0") is None:
    # Debian's torch 1.13 on Python 3.11, as examples/testcluster/torchrun-debian-shim mends it.
    import re

    def _from_str(cls, vm):
        if re.match(_api._VALUE_REGEX, vm):
            return cls(int(vm))
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}

    _api.Std.from_str = classmethod(_from_str)

port = sys.argv[1] if len(sys.argv) > 1 else "29761"
before = set(sys.modules)
# Underscores: torch 1.13 knows no dashed spellings.
rdzv = ["--standalone"] if os.environ.get("STANDALONE") == "1" else ["--master_port", port]
sys.argv = ["torchrun", "--nproc_per_node", "1"] + rdzv + ["--monitor_interval", "0.1", "--no_python", "true"]
prof = cProfile.Profile()
t0 = time.perf_counter()
if profile:
    prof.enable()
try:
    run.main()
except SystemExit:
    pass
if profile:
    prof.disable()
wall = time.perf_counter() - t0
lazy = sorted(set(sys.modules) - before)
print("torch %s: main() took %.0f ms (the worker /bin/true included); %d modules imported lazily"
      % (torch.__version__, wall * 1000, len(lazy)))
for m in lazy:
    print("  lazy import:", m)
if not profile:
    sys.exit(0)
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
print(out.getvalue())
