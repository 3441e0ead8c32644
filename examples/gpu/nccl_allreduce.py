# A real NCCL job for a GPU node: every rank reports the GPU and CPUs it got
# (to compare with gorun's plan), checks an all_reduce, and times a large
# one (bus bandwidth as nccl-tests defines it: algbw * 2(n-1)/n), then times
# bf16 matmuls on its GPU.
import os, socket, sys, time
import torch, torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
props = torch.cuda.get_device_properties(local)
bus = getattr(props, "pci_bus_id", None)
cpus = sorted(os.sched_getaffinity(0))
print(f"RANK {rank}/{world} local={local} host={socket.gethostname()} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} device={torch.cuda.current_device()} "
      f"name={props.name} pci_bus={bus} cpus={cpus[0]}-{cpus[-1]}({len(cpus)}) "
      f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')} "
      f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')} "
      f"interpreter={' '.join(getattr(sys, 'orig_argv', sys.argv)[:4])}", flush=True)

t = torch.full((1 << 20,), float(rank + 1), device="cuda")
dist.all_reduce(t)
assert t[0].item() == world * (world + 1) / 2, t[0].item()

size = int(os.environ.get("ALLREDUCE_BYTES", 1 << 30))
x = torch.ones(size // 4, device="cuda")
for _ in range(3):
    dist.all_reduce(x)
torch.cuda.synchronize()
iters = 10
t0 = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / iters
algbw = size / dt / 1e9
if rank == 0:
    print(f"ALLREDUCE bytes={size} time_ms={dt*1e3:.2f} algbw_GBps={algbw:.1f} "
          f"busbw_GBps={algbw * 2 * (world - 1) / world:.1f}", flush=True)
# GPU work inside one worker (what a supervisor could disturb even with one
# GPU, where an all_reduce moves nothing): bf16 matmuls.
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(20):
    a @ a
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / 20
if rank == 0:
    print(f"MATMUL bf16 8192^3 time_ms={dt*1e3:.3f} tflops={2 * 8192**3 / dt / 1e12:.1f}", flush=True)
dist.destroy_process_group()
