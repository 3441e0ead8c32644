"""An independent measurement to check gorun's bandwidth figures against:
plain torch, timed with CUDA events (gorun times with wall clocks around
synchronize), its own buffers, its own process layout.

  python3 bw_independent.py host              H2D/D2H, pinned, 256 MiB, per GPU
  python3 bw_independent.py p2p               every GPU pair, 256 MiB, per direction
  python3 bw_independent.py allreduce         NCCL all_reduce bf16 over all GPUs
                                              (one process per GPU, torch.multiprocessing)
Prints one JSON object per figure.
"""
import json, os, sys, time
import torch

MiB, GiB = 1 << 20, 1 << 30


def ev_time(fn, reps, dev):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize(dev)
    with torch.cuda.device(dev):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
    torch.cuda.synchronize(dev)
    return s.elapsed_time(e) / 1e3 / reps


def host():
    n = 256 * MiB
    for d in range(torch.cuda.device_count()):
        h = torch.empty(n, dtype=torch.uint8).pin_memory()
        g = torch.empty(n, dtype=torch.uint8, device=d)
        h2d = ev_time(lambda: g.copy_(h, non_blocking=True), 20, d)
        d2h = ev_time(lambda: h.copy_(g, non_blocking=True), 20, d)
        print(json.dumps({"kind": "host", "gpu": d, "h2d_gbs": n / h2d / 1e9, "d2h_gbs": n / d2h / 1e9}))


def p2p():
    n = 256 * MiB
    k = torch.cuda.device_count()
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            a = torch.empty(n, dtype=torch.uint8, device=i)
            b = torch.empty(n, dtype=torch.uint8, device=j)
            t = ev_time(lambda: b.copy_(a, non_blocking=True), 20, i)
            print(json.dumps({"kind": "p2p", "src": i, "dst": j, "uni_gbs": n / t / 1e9}))


def ar_worker(rank, world, port, q):
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    for size in (1 * MiB, 256 * MiB, 1 * GiB, 2 * GiB):
        x = torch.zeros(size // 2, dtype=torch.bfloat16, device=rank)
        for _ in range(3):
            dist.all_reduce(x)
        t = ev_time(lambda: dist.all_reduce(x), 10, rank)
        if rank == 0:
            alg = size / t / 1e9
            q.put({"kind": "allreduce", "ranks": world, "bytes": size, "algbw_gbs": alg,
                   "busbw_gbs": alg * 2 * (world - 1) / world})
        del x
    dist.destroy_process_group()


def allreduce():
    import socket
    import torch.multiprocessing as mp
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    world = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=ar_worker, args=(r, world, port, q)) for r in range(world)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    while not q.empty():
        print(json.dumps(q.get()))


if __name__ == "__main__":
    {"host": host, "p2p": p2p, "allreduce": allreduce}[sys.argv[1]]()
