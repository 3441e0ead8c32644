"""What a pooled worker's first moments cost, with and without its pages owned ahead.

A pooled interpreter (internal/agent/warm.py, `pool`) is a fork of a fork server that
imported torch; until it writes a page, it shares it with its siblings. What
a worker does first once its take comes (its environment replaced, the take's
JSON line parsed, its script compiled) writes many such pages, and each
write copies one. warm.py's `_own_pages` does that same work ahead, on
something else, while the interpreter waits. This forks interpreters the way
the fork server does (torch imported, `gc.freeze()`), alternating "plain" (as
before) and "owned" (`_own_pages` first, taken from internal/agent/warm.py itself),
and times, in each fork, the worker's first moments: the environment cleared
and set again (64 variables more), a 2.5 KB JSON line parsed, the script
compiled. It prints each round, the medians and owned/plain, and the fork's
own memory (Private_Dirty) before the take, which owning the pages ahead
adds to the waiting pool.

    usage: python3 docs/bench/pool_pages.py [ROUNDS] [SCRIPT]

SCRIPT (default docs/bench/restart_worker.py) is what is compiled as the
worker's script. Run it with the interpreter that has torch (here
/usr/bin/python3).
"""
import ast
import gc
import io
import json
import os
import statistics
import sys
import time
import warnings

import torch  # noqa: F401  the fork server's import: what the forks share

here = os.path.dirname(os.path.abspath(__file__))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
script = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "restart_worker.py")
warm_py = os.path.join(here, "..", "..", "internal", "agent", "warm.py")

# _own_pages as warm.py has it (warm.py runs itself when imported).
tree = ast.parse(open(warm_py).read(), warm_py)
own = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_own_pages"]
if not own:
    sys.exit("pool_pages.py: no _own_pages in " + warm_py)
ns = {"io": io, "os": os, "json": json, "warnings": warnings}
exec(compile(ast.Module(body=own, type_ignores=[]), warm_py, "exec"), ns)
own_pages = ns["_own_pages"]

source = open(script).read()
env = dict(os.environ)
env.update({"GORUN_BENCH_VAR%d" % i: "x" * 40 for i in range(64)})
take = json.dumps({"env": ["%s=%s" % kv for kv in env.items()], "dir": os.getcwd(), "args": ["/tmp/out"],
                   "mode": "script", "target": script, "shown": ["python3", "-u", script]})
gc.freeze()


def private_dirty_kb():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1])
    return -1


def one(owned):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if owned:
            own_pages()
        dirty = private_dirty_kb()
        t0 = time.perf_counter()
        job = json.loads(take)
        os.environ.clear()
        for kv in job["env"]:
            name, _, value = kv.partition("=")
            os.environ[name] = value
        compile(source, script, "exec", dont_inherit=True)
        ms = (time.perf_counter() - t0) * 1000
        os.write(w, ("%f %d" % (ms, dirty)).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 100).decode().split()
    os.close(r)
    os.waitpid(pid, 0)
    return float(out[0]), int(out[1])


res = {"plain": [], "owned": []}
for k in range(rounds):
    for mode in ("plain", "owned"):
        ms, dirty = one(mode == "owned")
        res[mode].append((ms, dirty))
        print("round=%d %s first_moments_ms=%.2f private_dirty_kb_before=%d" % (k + 1, mode, ms, dirty), flush=True)
med = {m: statistics.median(x[0] for x in v) for m, v in res.items()}
mem = {m: statistics.median(x[1] for x in v) for m, v in res.items()}
print("== summary over %d rounds (medians)" % rounds)
for m in ("plain", "owned"):
    print("%s first_moments_ms=%.2f private_dirty_kb_before=%d" % (m, med[m], mem[m]))
print("owned/plain first_moments=%.2f extra_private_mb=%.1f" % (med["owned"] / med["plain"], (mem["owned"] - mem["plain"]) / 1024))
