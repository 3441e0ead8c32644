"""A tiny real DDP job (gloo, CPU) for gorun's multi-node tests.

Every rank: init_process_group, an all_reduce check, STEPS training steps,
then a check that the parameters are identical on all ranks.

Environment knobs (all optional):
  STEPS=5, STEP_SLEEP=0        length of the run (seconds of sleep per step)
  PRINT_ENV=A,B,...            each rank prints these variables (or <unset>)
  CRASH_RANK=<global rank>     this rank exits with CRASH_CODE (default 13) ...
  CRASH_NODE=<hostname>        ... or every rank on this host (with CRASH_LOCAL_RANK: that one)
  CRASH_ON_ATTEMPT=0           ... only when GORUN_RESTART_COUNT (default 0) equals this
  CRASH_STEP=1                 ... at this step, after the collectives have started;
                               "init": before init_process_group (a start-up crash)
  CRASH_TIME_FILE=<path>       the crashing rank writes time.time() there as it exits
  CRASH_DIR=<dir>              every rank on host H in attempt A exits with CRASH_CODE at its
                               next step once <dir>/H.A exists (a test makes it appear)
  IMPORTED_FILE=<path>         every rank appends "<attempt> <rank> <time.time()>" once its imports are done
  STARTUP_SLEEP=<seconds>      every rank prints "starting" and sleeps before init_process_group
  HANG_RANK=<global rank>      this rank sleeps forever at step HANG_STEP (default 1),
                               so its peers wait in their next collective
Each rank prints one "ready" line with its CPU affinity, so tests can check binding.
"""
import os, socket, sys, time

import torch, torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def cpu_list(cpus):
    """Render a CPU set as 0-3,8 (the kernel's cpulist style)."""
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def should_crash(rank, local_rank, host, attempt):
    if os.environ.get("CRASH_ON_ATTEMPT", "0") != str(attempt):
        return False
    if "CRASH_RANK" in os.environ:
        return int(os.environ["CRASH_RANK"]) == rank
    if "CRASH_NODE" in os.environ and os.environ["CRASH_NODE"] == host:
        lr = os.environ.get("CRASH_LOCAL_RANK")
        return lr is None or int(lr) == local_rank
    return False


def crash_now(tag, step):
    code = int(os.environ.get("CRASH_CODE", 13))
    print(f"{tag} CRASH on purpose at step={step} attempt={attempt} code={code}", file=sys.stderr, flush=True)
    if os.environ.get("CRASH_TIME_FILE"):
        with open(os.environ["CRASH_TIME_FILE"], "w") as f:
            f.write(repr(time.time()))
    os._exit(code)  # no cleanup: like a real crash, peers are left waiting


t0 = time.time()
host = socket.gethostname()
attempt = int(os.environ.get("GORUN_RESTART_COUNT", "0") or 0)
if os.environ.get("IMPORTED_FILE"):
    with open(os.environ["IMPORTED_FILE"], "a") as f:
        f.write(f"{attempt} {os.environ['RANK']} {time.time()!r}\n")
if os.environ.get("CRASH_STEP") == "init" and should_crash(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), host, attempt):
    crash_now(f"[{host} rank={os.environ['RANK']} before init]", "init")
if os.environ.get("STARTUP_SLEEP"):
    print(f"[{host} rank={os.environ['RANK']}] starting", flush=True)
    time.sleep(float(os.environ["STARTUP_SLEEP"]))
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
lr = int(os.environ.get("LOCAL_RANK", 0))
tag = f"[{host} rank={rank}/{world} local={lr} pid={os.getpid()}]"

envs = [n for n in os.environ.get("PRINT_ENV", "").split(",") if n]
shown = " ".join(f"{n}={os.environ.get(n, '<unset>')}" for n in envs)
print(f"{tag} ready attempt={attempt} affinity={cpu_list(os.sched_getaffinity(0))}"
      + (f" env {shown}" if shown else ""), flush=True)

# allreduce sanity
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
steps = int(os.environ.get("STEPS", 5)); sleep = float(os.environ.get("STEP_SLEEP", 0))
crash = should_crash(rank, lr, host, attempt)
crash_step = int(os.environ.get("CRASH_STEP", 1)) if os.environ.get("CRASH_STEP") != "init" else -1
hang = os.environ.get("HANG_RANK") == str(rank)
hang_step = int(os.environ.get("HANG_STEP", 1))
g = torch.Generator().manual_seed(rank)
crash_file = os.path.join(os.environ["CRASH_DIR"], f"{host}.{attempt}") if os.environ.get("CRASH_DIR") else ""
for s in range(steps):
    if crash and s == crash_step or crash_file and os.path.exists(crash_file):
        crash_now(tag, s)
    if hang and s == hang_step:
        print(f"{tag} hanging on purpose at step={s}", flush=True)
        while True:
            time.sleep(3600)
    x = torch.randn(32, 16, generator=g); y = x.sum(1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if rank == 0 or sleep:
        print(f"{tag} step={s} loss={loss.item():.4f}", flush=True)
    if sleep: time.sleep(sleep)
# check params identical across ranks
p = torch.cat([q.detach().flatten() for q in model.parameters()])
ps = [torch.zeros_like(p) for _ in range(world)]
dist.all_gather(ps, p)
assert all(torch.equal(ps[0], q) for q in ps)
print(f"{tag} allreduce={t.item()} params-in-sync OK elapsed={time.time()-t0:.2f}s "
      f"attempt={attempt} restart={os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
dist.destroy_process_group()
