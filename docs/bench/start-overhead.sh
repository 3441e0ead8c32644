#!/usr/bin/env bash
# Start overhead: time from launch to the first worker line, plain torchrun
# vs the same torchrun through gorun, alternating in one run (the machine is
# noisy, so only the ratio of medians is meaningful).
#   usage: [GORUN=path] docs/bench/start-overhead.sh [ROUNDS] [TORCHRUN]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-10}
torchrun=${2:-$PWD/examples/testcluster/torchrun-debian-shim}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
gorun=${GORUN:-}
if [ -z "$gorun" ]; then go build -o "$work/gorun" . && gorun=$work/gorun; fi
printf 'print("first-line", flush=True)\n' >"$work/w.py"

# first_line CMD...: milliseconds until the first line containing first-line
# (the command then runs to its end, outside the measurement)
first_line() {
  local t0 t1="" line
  t0=$(date +%s%N)
  while IFS= read -r line; do
    if [ -z "$t1" ] && [[ $line == *first-line* ]]; then t1=$(date +%s%N); fi
  done < <("$@" 2>/dev/null)
  echo $(((t1 - t0) / 1000000))
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$work/t"; : >"$work/g"; : >"$work/o"
for _ in $(seq "$rounds"); do
  first_line "$torchrun" --nproc_per_node 1 "$work/w.py" >>"$work/t"
  first_line "$gorun" --torchrun "$torchrun" --nproc_per_node 1 "$work/w.py" >>"$work/g"
  first_line "$gorun" --preflight off --torchrun "$torchrun" --nproc_per_node 1 "$work/w.py" >>"$work/o"
done
t=$(median <"$work/t"); g=$(median <"$work/g"); o=$(median <"$work/o")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }
echo "rounds=$rounds torchrun_median_ms=$t gorun_median_ms=$g ratio=$(ratio "$g" "$t") gorun_preflight_off_median_ms=$o ratio_preflight_off=$(ratio "$o" "$t")"
