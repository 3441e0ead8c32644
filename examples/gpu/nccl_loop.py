# Collectives for a while (DURATION seconds, default 60) on every rank's GPU:
# something for NCCL's RAS to report on (launch's TestRASLive).
import os, time
import torch, torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local % torch.cuda.device_count())
dist.init_process_group("nccl")
x = torch.ones(1 << 20, device="cuda")
end = time.time() + float(os.environ.get("DURATION", 60))
n = 0
while time.time() < end:
    dist.all_reduce(x)
    torch.cuda.synchronize()
    n += 1
    time.sleep(0.01)
print(f"rank {dist.get_rank()}: {n} all_reduces", flush=True)
dist.destroy_process_group()
