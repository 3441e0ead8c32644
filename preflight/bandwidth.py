"""gorun's bandwidth measurement: moves real bytes and verifies them.

gorun embeds this file and runs it on every node with the interpreter
torchrun uses (`gorun preflight --bandwidth node|all`). It prints one JSON
object per line on stdout; gorun reads them as they come:

  {"event": "begin", "step": NAME, "limit_s": S, "t": T}  a step starts; gorun kills
                                                     the process group when it
                                                     has not ended after S
  {"event": "end", "step": NAME, "t": T}          (T: seconds since the start)
  {"event": "p2p", ...}, {"event": "host", ...}, {"event": "allreduce", ...},
  {"event": "cross", ...}                            one figure each
  {"event": "note", "msg": ...}                      e.g. no GPUs on this node
  {"event": "error", "step": NAME, "msg": ...}       a step that failed

Modes:
  node                 every GPU pair (P2P uni/bidirectional, latency), each
                       GPU's host link (pinned, local and remote NUMA CPUs),
                       NCCL all_reduce over the node's GPUs
  cross --rank R --world 2 --master HOST:PORT [--backend gloo|nccl]
                       all_reduce between two nodes (run on both)

Definitions as nccl-tests: algbw = bytes / time, all_reduce
busbw = algbw * 2(n-1)/n. Every copy is verified against a pattern
generated independently on the receiving side.

Test hooks (environment variables; for tests only):
  GORUN_BW_TEST_STALL=PREFIX    the first step whose name starts with PREFIX
                                sleeps instead of measuring (a stalled copy)
  GORUN_BW_TEST_CORRUPT=PREFIX  one byte of the data received in each step
                                whose name starts with PREFIX is changed
                                before verification (a corrupting data path);
                                "cross" changes one value of the verifying
                                all_reduce between nodes
  GORUN_BW_TEST_LIMIT_S=S       caps every step's limit at S seconds (so a
                                test of a stall is quick)
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

MiB = 1 << 20
GiB = 1 << 30
_out_lock = threading.Lock()
_t0 = time.monotonic()


def emit(event, **kw):
    kw["event"] = event
    kw["t"] = round(time.monotonic() - _t0, 4)  # seconds since the script started
    line = json.dumps(kw, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def set_pdeathsig():
    """Die with the parent (Linux): a killed measurement leaves no worker."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Steps:
    """Runs named steps, each under its own limit. A watchdog thread ends the
    process when a step overruns (gorun enforces the same limit from outside,
    by killing the process group; this covers a run by hand)."""

    def __init__(self):
        self.stall = os.environ.get("GORUN_BW_TEST_STALL", "")
        self.corrupt = os.environ.get("GORUN_BW_TEST_CORRUPT", "")
        self.current = None
        self.deadline = None
        t = threading.Thread(target=self._watch, daemon=True)
        t.start()

    def _watch(self):
        while True:
            time.sleep(0.05)
            d, name = self.deadline, self.current
            if d is not None and time.monotonic() > d + 1.0:
                emit("stalled", step=name)
                os._exit(3)

    def run(self, name, limit, fn, *args):
        cap = os.environ.get("GORUN_BW_TEST_LIMIT_S", "")
        if cap:
            limit = min(limit, float(cap))
        emit("begin", step=name, limit_s=limit)
        self.current, self.deadline = name, time.monotonic() + limit
        try:
            if self.stall and name.startswith(self.stall):
                self.stall = ""  # one stall is enough to show
                while True:
                    time.sleep(1)
            return fn(*args)
        except Exception as e:  # a failed step is reported, the rest go on
            emit("error", step=name, msg="%s: %s" % (type(e).__name__, e))
            return None
        finally:
            self.deadline = None
            emit("end", step=name)

    def corrupts(self, name):
        return bool(self.corrupt) and name.startswith(self.corrupt)


def pattern(torch, nbytes, salt, device):
    """Deterministic data, the same on every device for the same salt."""
    n = nbytes // 4
    x = torch.arange(n, dtype=torch.int32, device=device)
    x.mul_(-1640531535).add_(salt * 40503 + 7)  # int32 wraps: a hash, not a ramp
    return x


def damage(torch, t):
    b = t.view(torch.uint8)
    k = min(12345, b.numel() - 1)
    b[k:k + 1].add_(1)


def mismatches(torch, got, want):
    if torch.equal(got, want):
        return 0, -1
    bad = (got.view(torch.uint8) != want.view(torch.uint8)).nonzero()
    return int(bad.numel()), int(bad[0].item()) if bad.numel() else 0


def cpulist(s):
    out = []
    for part in s.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def fmt_cpus(cpus):
    cpus = sorted(cpus)
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(parts)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def numa_of(torch, dev):
    """The GPU's NUMA node and every node's CPUs (sysfs); -1 when unknown."""
    p = torch.cuda.get_device_properties(dev)
    node = -1
    if hasattr(p, "pci_bus_id"):
        bdf = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, p.pci_device_id)
        v = read("/sys/bus/pci/devices/%s/numa_node" % bdf)
        node = int(v) if v.lstrip("-").isdigit() else -1
    nodes = {}
    base = "/sys/devices/system/node"
    try:
        for name in sorted(os.listdir(base)):
            if name.startswith("node") and name[4:].isdigit():
                nodes[int(name[4:])] = cpulist(read("%s/%s/cpulist" % (base, name)))
    except OSError:
        pass
    return node, nodes


def timed(torch, devs, fn, reps):
    for d in devs:
        torch.cuda.synchronize(d)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    for d in devs:
        torch.cuda.synchronize(d)
    return (time.perf_counter() - t0) / reps


# ---------------------------------------------------------------- node mode

def p2p_pair(torch, steps, name, i, j, nbytes, salt):
    src_i = pattern(torch, nbytes, salt, i)
    src_j = pattern(torch, nbytes, salt + 1, j)
    dst_j = torch.empty_like(src_j)
    dst_i = torch.empty_like(src_i)
    access = bool(torch.cuda.can_device_access_peer(i, j))
    reps = 5
    dst_j.copy_(src_i)  # warm-up (and peer mapping)
    uni = timed(torch, (i, j), lambda: dst_j.copy_(src_i, non_blocking=True), reps)
    dst_i.copy_(src_j)
    uni_rev = timed(torch, (i, j), lambda: dst_i.copy_(src_j, non_blocking=True), reps)
    # Both directions at once: each copy on streams of its own, so neither
    # waits for the other (torch synchronises a copy with both devices'
    # current streams).
    s = [torch.cuda.Stream(device=d) for d in (i, j, i, j)]

    def both():
        with torch.cuda.stream(s[0]), torch.cuda.stream(s[1]):
            dst_j.copy_(src_i, non_blocking=True)
        with torch.cuda.stream(s[3]), torch.cuda.stream(s[2]):
            dst_i.copy_(src_j, non_blocking=True)

    bidir = timed(torch, (i, j), both, reps)
    small_src = torch.ones(2, dtype=torch.int32, device=i)
    small_dst = torch.empty(2, dtype=torch.int32, device=j)
    small_dst.copy_(small_src)
    lat = timed(torch, (i, j), lambda: small_dst.copy_(small_src, non_blocking=True), 50)
    rec = {"src": i, "dst": j, "bytes": nbytes, "peer_access": access,
           "uni_gbs": nbytes / uni / 1e9, "reverse_uni_gbs": nbytes / uni_rev / 1e9,
           "bidir_gbs": 2 * nbytes / bidir / 1e9,
           "latency_us": lat * 1e6}
    results = []
    for got, want_salt, dev, src, dst in ((dst_j, salt, j, i, j), (dst_i, salt + 1, i, j, i)):
        if steps.corrupts(name):
            damage(torch, got)
        n, first = mismatches(torch, got, pattern(torch, nbytes, want_salt, dev))
        results.append((src, dst, n, first))
    s_ij, s_ji = results
    rec["bad_bytes"], rec["first_bad"] = s_ij[2], s_ij[3]
    rec["reverse_bad_bytes"], rec["reverse_first_bad"] = s_ji[2], s_ji[3]
    emit("p2p", **rec)


def host_link(torch, steps, name, dev, cpus, node, local, nbytes, salt):
    allowed = os.sched_getaffinity(0)
    use = set(cpus) & allowed if cpus else allowed
    if use:
        os.sched_setaffinity(0, use)  # pinned pages are touched by this thread: its node
    try:
        h_src = pattern(torch, nbytes, salt, "cpu").pin_memory()
        h_dst = torch.empty_like(h_src).pin_memory()
        d = torch.empty(nbytes // 4, dtype=torch.int32, device=dev)
        d_src = pattern(torch, nbytes, salt + 1, dev)
        d.copy_(h_src)
        reps = 5
        h2d = timed(torch, (dev,), lambda: d.copy_(h_src, non_blocking=True), reps)
        d2h = timed(torch, (dev,), lambda: h_dst.copy_(d_src, non_blocking=True), reps)
        if steps.corrupts(name):
            damage(torch, d)
        n, first = mismatches(torch, d, pattern(torch, nbytes, salt, dev))
        if steps.corrupts(name):
            damage(torch, h_dst)
        rn, rfirst = mismatches(torch, h_dst, pattern(torch, nbytes, salt + 1, "cpu"))
        emit("host", gpu=dev, numa_node=node, local=local, cpus=fmt_cpus(use),
             bytes=nbytes, h2d_gbs=nbytes / h2d / 1e9, d2h_gbs=nbytes / d2h / 1e9,
             bad_bytes=n, first_bad=first, reverse_bad_bytes=rn, reverse_first_bad=rfirst)
    finally:
        os.sched_setaffinity(0, allowed)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def allreduce_sizes(n):
    return [1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB, 2 * GiB] if n > 1 else [1 * MiB, 256 * MiB, 1 * GiB]


def allreduce_rank(torch, steps, rank, world, port, emit_results):
    """One rank of the node's all_reduce (rank 0 is the main process)."""
    import datetime
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    x = torch.full((MiB // 2,), float(rank + 1), dtype=torch.bfloat16, device=dev)

    def init():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=30))
        dist.all_reduce(x)
        torch.cuda.synchronize()
        return True

    if steps is None:
        init()
    elif not steps.run("allreduce init", 30, init):
        return
    try:
        want = world * (world + 1) / 2
        if steps is not None and steps.corrupts("allreduce"):
            damage(torch, x)
        bad = int((x.float() != want).sum().item())
        buf = torch.zeros(max(allreduce_sizes(world)) // 2, dtype=torch.bfloat16, device=dev)
        for size in allreduce_sizes(world):
            t = buf[: size // 2]

            def measure(t=t):
                dist.all_reduce(t)
                dist.all_reduce(t)
                torch.cuda.synchronize()
                reps = 5 if size >= 256 * MiB else 20
                dist.barrier()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(reps):
                    dist.all_reduce(t)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / reps

            if steps is not None:
                el = steps.run("allreduce %d" % size, 10, measure)
            else:
                el = measure()
            if emit_results and el:
                alg = size / el / 1e9
                emit("allreduce", ranks=world, bytes=size, dtype="bfloat16", time_us=el * 1e6,
                     algbw_gbs=alg, busbw_gbs=alg * 2 * (world - 1) / world, bad_values=bad,
                     nvls=os.environ.get("NCCL_NVLS_ENABLE", ""))
    finally:
        dist.destroy_process_group()


def worker_main(argv):
    """An all_reduce rank other than 0: started early (importing torch takes
    seconds), it waits for a line on stdin, then runs."""
    set_pdeathsig()
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    import torch
    torch.cuda.init()
    if sys.stdin.readline().strip() != "go":
        return
    allreduce_rank(torch, None, rank, world, port, False)


def node_main(args):
    steps = Steps()
    holder = {}

    def init():
        import torch
        holder["torch"] = torch
        return torch.cuda.is_available() and torch.cuda.device_count()

    t0 = time.monotonic()
    n = steps.run("init", 60, init) or 0
    torch = holder.get("torch")
    if torch is None:
        return 1
    if n == 0:
        emit("note", msg="no GPUs on this node: P2P, host link and NCCL all_reduce steps skipped",
             torch=torch.__version__)
        return 0
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        nccl = ""
    emit("note", msg="%d GPU(s): %s" % (n, torch.cuda.get_device_name(0)), gpus=n, torch=torch.__version__,
         cuda=torch.version.cuda or "", nccl=nccl)
    workers = []
    port = free_port()
    if n > 1 and not args.get("no_allreduce"):
        env = dict(os.environ)
        for r in range(1, n):
            workers.append(subprocess.Popen([sys.executable, __file__, "--allreduce-worker", str(r), str(n), str(port)],
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True))
    for d in range(n):
        torch.cuda.set_device(d)
        torch.empty(1, device=d)
    nbytes = int(args.get("p2p_bytes", 256 * MiB))
    salt = 1
    for i in range(n):
        for j in range(i + 1, n):
            name = "p2p %d<->%d" % (i, j)
            steps.run(name, 5, p2p_pair, torch, steps, name, i, j, nbytes, salt)
            salt += 2
    hbytes = int(args.get("host_bytes", 256 * MiB))
    for d in range(n):
        node, nodes = numa_of(torch, d)
        local = nodes.get(node, [])
        name = "host %d local" % d
        steps.run(name, 5, host_link, torch, steps, name, d, local, node, True, hbytes, salt)
        salt += 2
        for other in sorted(nodes):
            if node >= 0 and other != node and set(nodes[other]) & os.sched_getaffinity(0):
                name = "host %d remote" % d
                steps.run(name, 5, host_link, torch, steps, name, d, nodes[other], other, False, hbytes, salt)
                salt += 2
                break
    if not args.get("no_allreduce"):
        try:
            for w in workers:
                w.stdin.write("go\n")
                w.stdin.flush()
            allreduce_rank(torch, steps, 0, n, port, True)
            for w in workers:
                w.wait(timeout=30)
        except Exception as e:  # a worker that died or hangs: say so, leave none behind
            emit("error", step="allreduce", msg="%s: %s" % (type(e).__name__, e))
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
    emit("note", msg="measured in %.1fs" % (time.monotonic() - t0), seconds=time.monotonic() - t0)
    return 0


# ---------------------------------------------------------------- cross mode

def cross_main(args):
    import datetime
    steps = Steps()
    holder = {}

    def init():
        import torch
        import torch.distributed as dist
        holder["torch"], holder["dist"] = torch, dist
        backend = args.get("backend") or ("nccl" if torch.cuda.is_available() else "gloo")
        holder["backend"] = backend
        dev = torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(0)
            dev = torch.device("cuda", 0)
        holder["dev"] = dev
        dist.init_process_group(backend, init_method="tcp://" + args["master"], rank=int(args["rank"]),
                                world_size=int(args["world"]), timeout=datetime.timedelta(seconds=float(args.get("limit", 20))))
        return True

    if not steps.run("cross init", float(args.get("limit", 20)) + 5, init):
        return 1
    torch, dist, dev, backend = holder["torch"], holder["dist"], holder["dev"], holder["backend"]
    world, rank = int(args["world"]), int(args["rank"])
    budget = float(args.get("budget", 3))
    sizes = [256 * 1024, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
    if backend == "nccl":
        sizes += [1 * GiB]
    start = time.monotonic()
    x = torch.full((1024,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    if steps.corrupts("cross"):
        x[0] += 1
    bad = int((x != world * (world + 1) / 2).sum().item())
    for size in sizes:
        t = torch.zeros(size // 4, dtype=torch.float32, device=dev)

        def measure():
            # A fixed count: both ranks must run the same collectives.
            dist.all_reduce(t)
            if backend == "nccl":
                torch.cuda.synchronize()
            reps, t0 = 3, time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(t)
            if backend == "nccl":
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / reps

        el = steps.run("cross %d" % size, float(args.get("limit", 20)), measure)
        if not el:
            return 1
        alg = size / el / 1e9
        emit("cross", rank=rank, ranks=world, backend=backend, bytes=size, time_us=el * 1e6,
             algbw_gbs=alg, busbw_gbs=alg * 2 * (world - 1) / world, bad_values=bad)
        # Both ranks must run the same collectives: rank 0 decides whether
        # the next size (about 4x longer) still fits the budget.
        go = torch.tensor([1.0 if time.monotonic() - start + 5 * el * 4 < budget else 0.0], device=dev)
        dist.broadcast(go, 0)
        if go.item() == 0:
            break
    dist.destroy_process_group()
    return 0


def parse(argv):
    args = {"mode": argv[0] if argv else "node"}
    i = 1
    while i < len(argv):
        k = argv[i].lstrip("-").replace("-", "_")
        if k in ("no_allreduce",):
            args[k] = True
            i += 1
            continue
        args[k] = argv[i + 1]
        i += 2
    return args


def main(argv):
    if argv and argv[0] == "--allreduce-worker":
        worker_main(argv[1:])
        return 0
    args = parse(argv)
    if args["mode"] == "cross":
        return cross_main(args)
    return node_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
