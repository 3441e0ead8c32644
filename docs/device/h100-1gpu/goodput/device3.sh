#!/usr/bin/env bash
# Goodput on the GPU machine (issue 49): a torch.compile job that prints its
# steps and logs each with its own clock; gorun's --summary against it.
set -u
export PATH=/opt/torch/.venv/bin:$PATH
cd "$(dirname "$0")/.."
cat > /tmp/compile_job.py <<'PY'
import os, time, torch
rank = int(os.environ["RANK"])
m = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048)).cuda()
mc = torch.compile(m)
x = torch.randn(512, 2048, device="cuda")
log = open(os.environ["STEP_LOG"], "w") if rank == 0 else None
for step in range(1, 301):
    y = mc(x); y.sum().backward(); torch.cuda.synchronize()
    print(f"step {step} loss {y.float().mean().item():.4f}", flush=True)
    if log: log.write(f"{step} {time.time():.4f}\n"); log.flush()
    time.sleep(0.02)
PY
nvidia-smi -L > "$OUT/machine.txt" 2>&1; python3 -c 'import torch; print("torch", torch.__version__)' >> "$OUT/machine.txt" 2>&1
for i in 1; do
  start=$(date +%s.%N)
  STEP_LOG=$OUT/steps-$i.log timeout 170 ./.dev/gorun --nproc-per-node 1 --summary "$OUT/summary-$i.json" /tmp/compile_job.py > "$OUT/out-$i.txt" 2>&1
  echo "rc=$? start=$start end=$(date +%s.%N)" > "$OUT/run-$i.txt"
done
