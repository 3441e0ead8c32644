#!/usr/bin/env bash
# A Ctrl-C at each moment of a start: gorun (its defaults: preflight, the worker pool where
# --prewarm auto starts one) launches NPROC ranks of a script that imports torch and sleeps;
# SIGINT comes DELAY seconds after the launch, for each DELAY in DELAYS. Per run: gorun's exit
# code, SIGINT → gorun's exit in ms, and the processes of the job left after it (python
# processes and gorun's own, counted in /proc by the job's marker in their environment;
# on a GPU machine also the GPU's compute processes).
# ARGS are more gorun flags (for example "--max-restarts 1 --warm-restart early": the next
# attempt's standby and its pool are there too).
#   usage: GORUN=path [NPROC=2] [DELAYS="0.3 1 2 3 4 6"] [ROUNDS=2] [ARGS=...] docs/bench/stop-during-start.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
gorun=${GORUN:?set GORUN to the gorun binary}
nproc=${NPROC:-2} rounds=${ROUNDS:-2} delays=${DELAYS:-0.3 1 2 3 4 6} args=${ARGS:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/job.py" <<'PY'
import os, sys, time
import torch
print("rank %s imported torch" % os.environ.get("RANK"), flush=True)
time.sleep(60)
PY
left() { # the job's processes still alive, by the marker in their environment
  local n=0 p
  for p in /proc/[0-9]*; do
    grep -qsz "^GORUN_BENCH_MARK=$1\$" "$p/environ" && n=$((n + 1))
  done
  echo "$n"
}
gpu() { command -v nvidia-smi >/dev/null && echo " gpu_procs=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"; }
echo "== $(date -u +%FT%TZ) $(nproc) CPUs; $("$gorun" version | head -1); NPROC=$nproc ARGS=$args"
for r in $(seq "$rounds"); do
  for d in $delays; do
    mark="stop-$r-$d-$$"
    GORUN_BENCH_MARK=$mark "$gorun" $args --nproc-per-node "$nproc" "$work/job.py" >"$work/out" 2>&1 &
    pid=$!
    sleep "$d"
    sent=$(date +%s%N)
    kill -INT "$pid"
    wait "$pid"
    code=$?
    took=$((($(date +%s%N) - sent) / 1000000))
    sleep 0.5
    echo "round=$r delay=${d}s exit=$code sigint_to_exit_ms=$took imported=$(grep -c 'imported torch' "$work/out") left=$(left "$mark")$(gpu)"
  done
done
