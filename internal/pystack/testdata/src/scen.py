import os, sys, time, threading, socket
import torch, torch.distributed as dist
scen = os.environ["SCEN"]; rank = int(os.environ["RANK"])
if scen == "init" and rank == 2:
    time.sleep(3600)  # never joins the rendezvous
dist.init_process_group("gloo")
def busy():
    while True:
        time.sleep(0.5)
if scen == "threads":
    threading.Thread(target=busy, name="loader", daemon=True).start()
    if rank == 1:
        threading.Event().wait()
    dist.all_reduce(torch.ones(2))
elif scen == "ddp":
    m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    if rank == 1:
        time.sleep(3600)
    for _ in range(3):
        m(torch.ones(2, 4)).sum().backward()
elif scen == "socket":
    if rank == 0:
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); c, _ = s.accept() if False else (None, None)
        a, b = socket.socketpair(); a.recv(1)
    dist.barrier()
elif scen == "recurse":
    def deep(n):
        if n == 0:
            dist.all_reduce(torch.ones(2)); return
        deep(n - 1)
    if rank == 0:
        time.sleep(3600)
    deep(150)
elif scen == "init":
    dist.all_reduce(torch.ones(2))
elif scen == "mismatch":
    if rank == 0:
        dist.barrier()
    else:
        dist.all_reduce(torch.ones(2))
