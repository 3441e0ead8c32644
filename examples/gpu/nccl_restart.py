# The NCCL restart case for a GPU node: every rank joins an NCCL group and
# all-reduces; on the first attempt one rank (FAIL_RANK, default the last)
# exits with 7 right after its first all_reduce, as a crash mid-training
# does. The attempt after it must recover: a fresh NCCL group, 20 more
# all_reduces, then "RECOVERED". The attempt number is read from
# TORCHELASTIC_RESTART_COUNT, which torchrun sets and gorun sets to its own
# group attempt.
import os, sys, time
import torch, torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.cuda.set_device(local % torch.cuda.device_count())
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
fail = int(os.environ.get("FAIL_RANK", world - 1))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
if attempt == 0 and rank == fail:
    print(f"rank {rank} attempt {attempt}: exiting with 7 on purpose", flush=True)
    os._exit(7)
for _ in range(20):
    dist.all_reduce(x)
    time.sleep(0.05)
torch.cuda.synchronize()
print(f"RECOVERED rank={rank} attempt={attempt}", flush=True)
dist.destroy_process_group()
