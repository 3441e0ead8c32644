"""Where torchrun's own start goes, once torch.distributed.run is imported.

A warm standby torchrun (gorun's --warm-restart) has imported
torch.distributed.run before the restart; what it still pays after the
hand-off is torchrun's main(): argument parsing, the rendezvous, the
agent, the workers' spawn. This runs that main() in-process, under
cProfile, with `--nproc-per-node 1 --no-python true` (the worker is
/bin/true), and prints main()'s wall time, the modules it imported
lazily, and the functions with the most cumulative time.

    usage: python3 docs/bench/torchrun_profile.py [PORT]
"""
import cProfile
import io
import pstats
import sys
import time

import torch
import torch.distributed.run as run

port = sys.argv[1] if len(sys.argv) > 1 else "29761"
before = set(sys.modules)
sys.argv = ["torchrun", "--nproc-per-node", "1", "--master-port", port, "--monitor-interval", "0.1", "--no-python", "true"]
prof = cProfile.Profile()
t0 = time.perf_counter()
prof.enable()
try:
    run.main()
except SystemExit:
    pass
prof.disable()
wall = time.perf_counter() - t0
lazy = sorted(set(sys.modules) - before)
print("torch %s: main() took %.0f ms (the worker /bin/true included); %d modules imported lazily"
      % (torch.__version__, wall * 1000, len(lazy)))
for m in lazy:
    print("  lazy import:", m)
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
print(out.getvalue())
