#!/usr/bin/env bash
# Worker-level supervision on a GPU node, plain torchrun and gorun side by
# side in one run. Writes its results under DIR (default $OUT).
#   usage: GORUN=path docs/bench/gpu-supervision.sh PART [ROUNDS] [DIR]
#   PART: overhead  start time to the first worker line (ratio of medians)
#                   and the NCCL all_reduce figures of examples/gpu/nccl_allreduce.py
#         restart   ROUNDS runs each of examples/gpu/nccl_restart.py with
#                   --max-restarts 1: how often each launcher recovers
#         hang      examples/gpu/hang_demo.py under gorun --hang-timeout 10s
#         ras       NCCL's RAS asked while examples/gpu/nccl_loop.py runs under
#                   gorun (needs the launch test binary in LAUNCH_TEST)
#   PREWARM=VALUE runs gorun with --prewarm VALUE (the worker pool: torch, auto) in every part.
set -uo pipefail
cd "$(dirname "$0")/../.."
part=$1 rounds=${2:-10} dir=${3:-${OUT:-.}}
gorun=${GORUN:?set GORUN to the gorun binary}
pool=(${PREWARM:+--prewarm "$PREWARM"})
torchrun=$(command -v torchrun)
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$dir"
{ echo "date: $(date -u +%FT%TZ)"; nvidia-smi -L; "$gorun" version
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  env | grep -E '^NCCL_' | sort; } >"$dir/$part-machine.txt" 2>&1

case $part in
overhead)
  bash docs/bench/start-overhead.sh "$rounds" "$torchrun" | tee "$dir/overhead.txt"
  for i in 1 2 3; do
    for l in torchrun gorun; do
      if [ $l = torchrun ]; then cmd=("$torchrun"); else cmd=("$gorun" --torchrun "$torchrun" "${pool[@]}"); fi
      printf '%s round %d: ' $l "$i"
      "${cmd[@]}" --nproc_per_node "$ngpu" examples/gpu/nccl_allreduce.py 2>&1 | grep -E 'ALLREDUCE|MATMUL' | tr '\n' ' ' ; echo
    done
  done | tee "$dir/allreduce.txt"
  ;;
restart)
  for l in torchrun gorun; do
    ok=0
    for i in $(seq "$rounds"); do
      if [ $l = torchrun ]; then cmd=("$torchrun"); else cmd=("$gorun" --torchrun "$torchrun" "${pool[@]}"); fi
      t0=$(date +%s%N)
      timeout 150 "${cmd[@]}" --nproc_per_node "$ngpu" --max-restarts 1 examples/gpu/nccl_restart.py >"$dir/restart-$l-$i.log" 2>&1
      rc=$? t=$((($(date +%s%N) - t0) / 1000000))
      n=$(grep -c RECOVERED "$dir/restart-$l-$i.log")
      [ "$rc" = 0 ] && [ "$n" = "$ngpu" ] && ok=$((ok + 1))
      echo "$l run $i: exit $rc, ranks recovered $n of $ngpu, ${t} ms"
    done
    echo "$l: recovered in $ok of $rounds runs"
  done | tee "$dir/restart.txt"
  tar czf "$dir/restart-logs.tgz" -C "$dir" $(cd "$dir" && ls restart-*-*.log) && rm -f "$dir"/restart-*-*.log
  ;;
hang)
  t0=$(date +%s%N)
  "$gorun" --torchrun "$torchrun" "${pool[@]}" --nproc_per_node 2 --hang-timeout 10s examples/gpu/hang_demo.py >"$dir/hang.txt" 2>&1
  rc=$?
  echo "exit $rc after $((($(date +%s%N) - t0) / 1000000)) ms" | tee -a "$dir/hang.txt"
  ;;
ras)
  DURATION=40 "$gorun" --torchrun "$torchrun" "${pool[@]}" --nproc_per_node "$ngpu" examples/gpu/nccl_loop.py >"$dir/ras-job.txt" 2>&1 &
  job=$!
  sleep 15
  GORUN_RAS_LIVE=default "${LAUNCH_TEST:?set LAUNCH_TEST to a launch test binary}" -test.run TestRASLive -test.v >"$dir/ras.txt" 2>&1
  echo "TestRASLive exit $?" | tee -a "$dir/ras.txt"
  wait $job; echo "job exit $?" >>"$dir/ras-job.txt"
  ;;
esac
