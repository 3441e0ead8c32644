#!/usr/bin/env bash
# A cold start on one machine: launch → every rank past `import torch`, for a job of NPROC
# ranks that imports torch and ends. torchrun, gorun (GORUN, its defaults: preflight, the
# worker pool) and, with BEFORE=path, another gorun build, alternating, ROUNDS rounds; the
# medians and the ratios to torchrun at the end. The times are the ranks' own clocks (one
# machine) against the launcher's start.
#   usage: GORUN=path [BEFORE=path] [ROUNDS=7] [NPROC=2] [COLD_SCRIPT=1] [TORCHRUN=torchrun] [PYTHON=python3]
#          docs/bench/launch-import.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C
rounds=${ROUNDS:-7} nproc=${NPROC:-2}
torchrun=$(command -v "${TORCHRUN:-torchrun}") python=$(command -v "${PYTHON:-python3}")
gorun=$(realpath "${GORUN:?set GORUN to the gorun binary}")
export PYTHON_EXEC=$python
work=$(mktemp -d /tmp/gorun-launch-XXXXXX)
trap 'rm -rf "$work"' EXIT
# COLD_SCRIPT=1: the job sets OMP_NUM_THREADS before its import, so gorun's
# pool must start its workers cold (docs/compatibility.md, "What a pooled worker
# guarantees"): what such a script costs against torchrun's own start.
{
  echo 'import os, time'
  echo 't1 = time.time()'
  [ "${COLD_SCRIPT:-0}" = 1 ] && echo 'os.environ["OMP_NUM_THREADS"] = "2"'
  echo 'import torch'
  # one write(2) per line: under plain torchrun the ranks share its stdout, and
  # print(), unbuffered (python -u), writes each of its arguments apart
  echo 'os.write(1, ("imported %s %.6f %.6f\n" % (os.environ["RANK"], time.time(), t1)).encode())'
} >"$work/job.py"
port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# one LAUNCHER: prints its figure (ms from its start to the last rank past the import),
# then the longest a rank took from its script's first line past the import (ms)
one() {
  local c out t0
  case $1 in
  torchrun) c=("$torchrun") ;;
  gorun) c=("$gorun" --torchrun "$torchrun") ;;
  before) c=("$BEFORE" --torchrun "$torchrun") ;;
  esac
  c+=(--nproc_per_node "$nproc" --master_port "$(port)" "$work/job.py")
  t0=$EPOCHREALTIME
  out=$(timeout 120 "${c[@]}" 2>&1) || { echo "launch-import.sh: $1 failed:" >&2; tail -20 <<<"$out" >&2; exit 1; }
  awk -v t0="$t0" -v n="$nproc" '$1 == "imported" || $3 == "imported" { for (i = 1; i <= NF; i++) if ($i == "imported") { t = $(i + 2); s = $(i + 3) } if (t > hi) hi = t; if (t - s > imp) imp = t - s; k++ }
    END { if (k != n) exit 1; printf "%.0f %.0f\n", (hi - t0) * 1000, imp * 1000 }' <<<"$out" ||
    { echo "launch-import.sh: $1 exited 0 but not all $nproc ranks printed; its output:" >&2; tail -20 <<<"$out" >&2; exit 1; }
}
launchers=(torchrun gorun)
[ -z "${BEFORE:-}" ] || launchers+=(before)
echo "== launch-import.sh: $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   ROUNDS=$rounds NPROC=$nproc COLD_SCRIPT=${COLD_SCRIPT:-0} torchrun=$torchrun python=$python torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "   gorun=$gorun${BEFORE:+ before=$BEFORE}"
for l in "${launchers[@]}"; do one "$l" >/dev/null; done # warm-up: the page cache
for ((r = 1; r <= rounds; r++)); do
  for l in "${launchers[@]}"; do
    row=$(one "$l")
    read -r ms imp <<<"$row"
    echo "round=$r $l launch_import_all_ms=$ms worker_import_ms=$imp"
    echo "$l $ms" >>"$work/rows"
  done
done
echo "== medians over $rounds rounds (ms), ratio to torchrun's"
awk '{ v[$1] = v[$1] " " $2 } END {
  for (l in v) { n = split(substr(v[l], 2), a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    m[l] = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2; lo[l] = a[1]; hi[l] = a[n] }
  for (l in m) printf "%s median=%.0f min=%.0f max=%.0f ratio=%.2f\n", l, m[l], lo[l], hi[l], m[l] / m["torchrun"] }' "$work/rows" | sort
