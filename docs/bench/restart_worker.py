import time; T_START = time.time()  # first statement: the interpreter is up (before torch)
# The worker of docs/bench/restart.sh: standard library and torch only.
#   restart_worker.py DIR
# Attempt 0 (TORCHELASTIC_RESTART_COUNT, which torchrun and gorun both set)
# imports torch, joins the process group (gloo), trains for CRASH_AFTER
# seconds (default 5; 0 crashes at once, before joining: a start-up
# crash) and exits 1; the next attempt imports torch and exits 0. Each rank writes wall-clock times (time.time(), one machine's clock for
# every node of the test clusters) into DIR, one file per event:
#   start-a<K>-r<RANK>   the script's first statement
#   import-a<K>-r<RANK>  the line after `import torch`
#   crash-a0-r<RANK>     just before os._exit(1) on attempt 0
import os
import sys

import torch

T_IMPORT = time.time()

out = sys.argv[1]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = os.environ.get("RANK", "x")


def stamp(event, t):
    # write then rename: a reader never sees half a number
    path = os.path.join(out, f"{event}-a{attempt}-r{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{t:.6f}\n")
    os.rename(path + ".tmp", path)


stamp("start", T_START)
stamp("import", T_IMPORT)
if attempt == 0:
    crash_after = float(os.environ.get("CRASH_AFTER", "5"))
    if crash_after > 0:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        time.sleep(crash_after)
    stamp("crash", time.time())
    os._exit(1)
print(f"rank {rank} attempt {attempt} torch {torch.__version__}: up", flush=True)
