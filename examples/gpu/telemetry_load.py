# A training-like GPU load for the telemetry runs: every step does bf16
# matmuls, a host-to-device copy (PCIe traffic) and an all_reduce (NVLink
# traffic where there are peers), and prints one line. Rank $SLOW_RANK
# sleeps $SLOW_MS ms on the host before each step, the way a starved input
# pipeline does: its GPU idles while the others wait in the all_reduce.
# Rank 0 prints the steady-state throughput at the end:
#   RESULT steps=N seconds=S steps_per_s=X tflops=Y
import os, time
import torch, torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
duration = float(os.environ.get("DURATION", "20"))
slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
slow_ms = float(os.environ.get("SLOW_MS", "0"))
n = int(os.environ.get("MATMUL_N", "8192"))

a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
host = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
dev = torch.empty_like(host, device="cuda")
g = torch.ones(32 << 20, device="cuda")  # 128 MiB of fp32 "gradients"
matmuls = 8

def step():
    for _ in range(matmuls):
        a @ a
    dev.copy_(host, non_blocking=True)
    dist.all_reduce(g)

for _ in range(3):
    step()
torch.cuda.synchronize()
dist.barrier()
t0 = time.perf_counter()
steps = 0
while True:
    if rank == slow_rank and slow_ms > 0:
        time.sleep(slow_ms / 1000)
    step()
    torch.cuda.synchronize()
    steps += 1
    elapsed = time.perf_counter() - t0
    if steps % 10 == 0:
        print(f"step {steps} rank {rank} {elapsed:.1f}s", flush=True)
    # Every rank stops after the same step: rank 0 decides and tells.
    done = torch.tensor([1.0 if elapsed >= duration else 0.0], device="cuda")
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    if done.item() > 0:
        break
elapsed = time.perf_counter() - t0
if rank == 0:
    print(f"RESULT steps={steps} seconds={elapsed:.2f} steps_per_s={steps / elapsed:.3f} "
          f"tflops={steps * matmuls * 2 * n**3 / elapsed / 1e12:.1f}", flush=True)
dist.destroy_process_group()
