#!/usr/bin/env bash
# The end of a successful run on one machine: ms from the last worker line
# to the launcher's exit, for torchrun, gorun (GORUN) and, with BEFORE=path,
# another gorun build, alternating, ROUNDS rounds; medians at the end.
# Both launchers get --monitor_interval MONITOR (default 0.1, torchrun's own
# default since torch 2.2; torch 1.13's is 5 s, whose phase would decide the
# figure): what is left is the launcher's own end. MONITOR=default gives
# neither the option, so each uses its own default (gorun sets 0.1 where the
# user set none), and the job runs 0.6 s longer each round, so that its end
# falls at another point of a 5 s loop.
#   usage: GORUN=path [BEFORE=path] [ROUNDS=5] [MONITOR=0.1|default] [TORCHRUN=torchrun] [PYTHON=python3]
#          docs/bench/end-of-run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C
rounds=${ROUNDS:-5} monitor=${MONITOR:-0.1}
torchrun=$(command -v "${TORCHRUN:-torchrun}") python=$(command -v "${PYTHON:-python3}")
gorun=$(realpath "${GORUN:?set GORUN to the gorun binary}")
export PYTHON_EXEC=$python STEPS=20 STEP_SLEEP=0.2
port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
one() { # LAUNCHER: ms from the last worker line to its exit
  local c last=0 l
  case $1 in
  torchrun) c=("$torchrun") ;;
  gorun) c=("$gorun" --torchrun "$torchrun") ;;
  before) c=("$BEFORE" --torchrun "$torchrun") ;;
  esac
  c+=(--nproc_per_node 2 --master_port "$(port)")
  [ "$monitor" = default ] || c+=(--monitor_interval "$monitor")
  c+=(examples/testcluster/train_ddp.py --tag end)
  while IFS= read -r l; do
    case $l in *"allreduce="*) last=$EPOCHREALTIME ;; esac
  done < <(timeout 120 "${c[@]}" 2>&1)
  [ "$last" != 0 ] || { echo "end-of-run.sh: $1 printed no worker line" >&2; exit 1; }
  "$python" -c "print(round(($EPOCHREALTIME - $last) * 1000))"
}
launchers=(torchrun gorun)
[ -z "${BEFORE:-}" ] || launchers+=(before)
echo "== end-of-run.sh: $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   ROUNDS=$rounds MONITOR=$monitor torchrun=$torchrun torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "   gorun=$gorun${BEFORE:+ before=$BEFORE}"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for ((r = 1; r <= rounds; r++)); do
  [ "$monitor" != default ] || STEPS=$((20 + 3 * r))
  for l in "${launchers[@]}"; do
    ms=$(one "$l")
    echo "round=$r $l end_ms=$ms"
    echo "$l $ms" >>"$rows"
  done
done
echo "== medians over $rounds rounds (ms)"
sort -k1,1 -k2n "$rows" | awk '{ v[$1] = v[$1] " " $2; n[$1]++ } END { for (l in v) { split(substr(v[l], 2), a, " "); k = n[l]; m = k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2; printf "%s median=%.0f min=%.0f max=%.0f\n", l, m, a[1], a[k] } }' | sort
