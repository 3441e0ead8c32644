# How many threads a worker has once it has run CPU work, and how long the work took: for the
# worker pool against a cold start (OMP_NUM_THREADS from the plan).
import os, time, torch
x = torch.randn(1500, 1500)
t = time.time()
for _ in range(5): y = x @ x
z = torch.randn(4_000_000).sin().sum()
print("threads", len(os.listdir("/proc/self/task")), "torch", torch.get_num_threads(), "omp", os.environ.get("OMP_NUM_THREADS"), "ms", round((time.time()-t)*1000), flush=True)
