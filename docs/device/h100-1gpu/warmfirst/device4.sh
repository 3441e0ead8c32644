#!/usr/bin/env bash
# Issue 45 and 50 on one GPU: launch → ranks past import torch (a script that
# sets OMP_NUM_THREADS before its import, and a plain one), gorun against
# torchrun and the build before; the job's memory against plain torchrun's.
set -u
export PATH=/opt/torch/.venv/bin:$PATH
cd "$(dirname "$0")/.."
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'; git rev-parse --short HEAD; .dev/gorun version; .dev/gorun-before version; } > "$OUT/machine.txt" 2>&1
common="GORUN=.dev/gorun BEFORE=.dev/gorun-before NPROC=2 TORCHRUN=/opt/torch/.venv/bin/torchrun PYTHON=/opt/torch/.venv/bin/python3"
env $common ROUNDS=5 COLD_SCRIPT=1 timeout 170 bash docs/bench/launch-import.sh > "$OUT/launch-import-cold-script.txt" 2>&1; echo "cold rc=$?"
env $common ROUNDS=3 timeout 100 bash docs/bench/launch-import.sh > "$OUT/launch-import-pooled.txt" 2>&1; echo "pooled rc=$?"
env GORUN=$PWD/.dev/gorun BEFORE=$PWD/.dev/gorun-before PLAIN=1 PREFLIGHT=on ROUNDS=1 TORCHRUN=/opt/torch/.venv/bin/torchrun PYTHON=/opt/torch/.venv/bin/python3 timeout 120 bash docs/bench/pool-memory.sh > "$OUT/pool-memory.txt" 2>&1; echo "mem rc=$?"
tail -4 "$OUT"/*.txt
