#!/usr/bin/env bash
# The GPU checks with the worker pool on (--prewarm torch), on a GPU machine. Each part's
# output goes under DIR; a line per check on stdout.
#   usage: GORUN=path [ROUNDS=3] docs/bench/gpu-pool-checks.sh DIR
#   1. CUDA and NCCL in pooled workers: examples/gpu/nccl_allreduce.py under gorun --prewarm
#      torch (each rank prints its interpreter's command line: the pool's shim when pooled, warm-N.py pool or, torchrun being its fork server, warm-main.py main)
#      and under plain torchrun
#   2. NCCL restart: gpu-supervision.sh restart ROUNDS with PREWARM=torch, and gorun's restart
#      lines (how many workers were pooled)
#   3. a hang's stacks: gpu-supervision.sh hang with PREWARM=torch
#   4. nothing left: the GPU's compute processes and every python process, after
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=${1:?usage: GORUN=path docs/bench/gpu-pool-checks.sh DIR} rounds=${ROUNDS:-3}
gorun=${GORUN:?set GORUN to the gorun binary}
torchrun=$(command -v torchrun)
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$dir"
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $ngpu GPU(s), $(nproc) CPUs; $("$gorun" version)"
for i in 1 2; do
  "$torchrun" --nproc_per_node "$ngpu" examples/gpu/nccl_allreduce.py >"$dir/allreduce-torchrun-$i.txt" 2>&1
  echo "torchrun allreduce $i: exit $? $(grep -hE 'ALLREDUCE|MATMUL' "$dir/allreduce-torchrun-$i.txt" | tr '\n' ' ')"
  "$gorun" --torchrun "$torchrun" --prewarm torch --nproc_per_node "$ngpu" examples/gpu/nccl_allreduce.py >"$dir/allreduce-pool-$i.txt" 2>&1
  echo "gorun --prewarm torch allreduce $i: exit $? ranks in a pooled interpreter: $(grep -cE 'interpreter=.*warm-[0-9a-z]*\.py (pool|main)' "$dir/allreduce-pool-$i.txt") of $ngpu; $(grep -hE 'ALLREDUCE|MATMUL' "$dir/allreduce-pool-$i.txt" | tr '\n' ' ')"
done
PREWARM=torch bash docs/bench/gpu-supervision.sh restart "$rounds" "$dir" | sed 's/^/restart: /'
tar xzf "$dir/restart-logs.tgz" -O $(tar tzf "$dir/restart-logs.tgz" | grep gorun) | grep 'restart after' | sed 's/^/restart: /'
PREWARM=torch bash docs/bench/gpu-supervision.sh hang 1 "$dir"
echo "hang: $(tail -1 "$dir/hang.txt"); stacks named: $(grep -cE 'in (stall|all_reduce)' "$dir/hang.txt")"
sleep 1
echo "== after: GPU compute processes: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | wc -l); python processes: $(pgrep -c python || true)"
pgrep -a python || true
