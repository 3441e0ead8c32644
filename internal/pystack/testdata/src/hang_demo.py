# A hang for gorun's --hang-timeout on a GPU node: every rank joins a
# process group (NCCL when each rank has a GPU of its own, else gloo, with
# CUDA initialised either way, so torch's own signal handling is in place),
# then rank 1 sleeps instead of joining the next all_reduce, and every other
# rank waits in it. gorun must name the silent ranks and print rank 1 in
# time.sleep and the others in all_reduce.
import os, time
import torch, torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
world = int(os.environ["WORLD_SIZE"])
own_gpu = torch.cuda.device_count() >= world
torch.cuda.set_device(local % torch.cuda.device_count())
dist.init_process_group("nccl" if own_gpu else "gloo")
rank = dist.get_rank()
dev = "cuda" if own_gpu else "cpu"
torch.ones(1, device="cuda")  # a CUDA context in every rank
x = torch.ones(1 << 10, device=dev)
dist.all_reduce(x)
print(f"rank {rank}: first all_reduce done on {dist.get_backend()}", flush=True)


def stall():
    time.sleep(3600)


if rank == 1:
    print("rank 1: sleeping instead of joining the next all_reduce", flush=True)
    stall()
dist.all_reduce(x)
if dev == "cuda":
    torch.cuda.synchronize()
print(f"rank {rank}: unreachable", flush=True)
