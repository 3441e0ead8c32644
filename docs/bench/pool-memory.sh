#!/usr/bin/env bash
# The worker pool's memory while it waits: a NPROC-rank local job (import torch, a gloo group,
# then a sleep) with a restart left, so that the next attempt's pool waits idle beside the
# running workers. SETTLE seconds in, every idle pooled interpreter (command line
# `warm-N.py pool`, or `warm-main.py main` where the standby torchrun is the pool's fork server,
# itself counted then) is read: Rss and Pss from /proc/PID/smaps_rollup. Pss shares each page
# among the processes that map it, so its sum is what the idle pool costs the node; job_pss_mb
# sums it over the whole job (the launcher and everything under it). gorun (GORUN) and,
# with BEFORE=path, an older build take turns, ROUNDS each, both with --prewarm torch. With
# PLAIN=1, plain torchrun (--standalone --max_restarts 1) takes its turn too: the same job's
# summed Pss with no pool (idle=0), the baseline the others are read against.
#
#   usage: [NPROC=2] [ROUNDS=3] [SETTLE=10] [PREFLIGHT=off|on] [GORUN=path] [BEFORE=path] [PLAIN=1]
#          [TORCHRUN=cmd] [PYTHON=path] docs/bench/pool-memory.sh
#
# TORCHRUN defaults to examples/testcluster/torchrun-debian-shim where /usr/bin/python3 has
# torch (this machine), else torchrun; PYTHON to /usr/bin/python3, else python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
nproc=${NPROC:-2} rounds=${ROUNDS:-3} settle=${SETTLE:-10} preflight=${PREFLIGHT:-off}
gorun=${GORUN:-$repo/.dev/gorun}
if [ -z "${TORCHRUN:-}" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  torchrun=$repo/examples/testcluster/torchrun-debian-shim python=${PYTHON:-/usr/bin/python3}
else
  torchrun=${TORCHRUN:-torchrun} python=${PYTHON:-python3}
fi
python=$(command -v "$python")
export PYTHON_EXEC=$python
work=$(mktemp -d /tmp/gorun-poolmem-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/sleepy.py" <<EOF
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
time.sleep($settle + 8)
EOF
echo "== pool-memory.sh: $(date -u +%FT%TZ) $(git rev-parse --short HEAD), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
echo "   NPROC=$nproc ROUNDS=$rounds SETTLE=$settle; python: $python, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "   gorun: $gorun ($("$gorun" version 2>&1 | head -1))"
[ -z "${BEFORE:-}" ] || echo "   before: $BEFORE ($("$BEFORE" version 2>&1 | head -1))"
echo "   each: BIN --prewarm torch --preflight $preflight --max-restarts 1 --nproc-per-node $nproc sleepy.py; idle = the next attempt's pooled interpreters"
[ "${PLAIN:-0}" != 1 ] || echo "   torchrun: $torchrun --standalone --max_restarts 1 --nproc_per_node $nproc sleepy.py"

# tree PID: PID and every process under it
tree() {
  awk -v root="$1" 'FNR == 1 { split($0, a, ") "); split(a[2], f, " "); pid = FILENAME; sub("/proc/", "", pid); sub("/stat", "", pid); parent[pid] = f[2] }
    END { keep[root] = 1; do { more = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; more = 1 } } while (more); for (p in keep) print p }' /proc/[0-9]*/stat 2>/dev/null
}

# sample LABEL ROOT: the idle interpreters' Rss and Pss (MB), and how many there are (a
# standby torchrun that is its pool's fork server counts among them: warm-main.py main); and
# the Pss of the whole job under ROOT (the launcher), what the node pays for all of it
sample() {
  local n=0 rss=0 pss=0 p r s all=0
  for p in $(tree "$2"); do
    s=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
    all=$((all + ${s:-0}))
  done
  for p in $(pgrep -f 'warm-[0-9a-z]+\.py (pool|main)' || true); do
    [ -r "/proc/$p/smaps_rollup" ] || continue
    r=$(awk '/^Rss:/ {print $2}' "/proc/$p/smaps_rollup") s=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup")
    [ -n "$r" ] && [ -n "$s" ] || continue
    n=$((n + 1)) rss=$((rss + r)) pss=$((pss + s))
  done
  awk -v l="$1" -v n="$n" -v r="$rss" -v s="$pss" -v a="$all" 'BEGIN {
    printf "%s idle=%d rss_mb=%.0f pss_mb=%.0f pss_mb_per_interpreter=%.0f job_pss_mb=%.0f\n", l, n, r / 1024, s / 1024, n ? s / 1024 / n : 0, a / 1024 }'
}

run() {
  local label=$1 bin=$2
  if [ "$bin" = plain ]; then
    (cd "$work" && exec "$torchrun" --standalone --max_restarts 1 --nproc_per_node "$nproc" sleepy.py >"$work/$label.log" 2>&1) &
  else
    (cd "$work" && exec "$bin" --torchrun "$torchrun" --prewarm torch --preflight "$preflight" --max-restarts 1 \
      --nproc-per-node "$nproc" sleepy.py >"$work/$label.log" 2>&1) &
  fi
  local job=$!
  sleep "$settle"
  sample "$label" "$job"
  wait "$job" || { echo "$label: exit $?"; tail -5 "$work/$label.log"; }
  sleep 1
  left=$(pgrep -f 'warm-[0-9a-z]+\.py|sleepy\.py' || true)
  [ -z "$left" ] || echo "$label: left behind: $left"
}

tools=(gorun)
[ -z "${BEFORE:-}" ] || tools+=(before)
[ "${PLAIN:-0}" != 1 ] || tools+=(torchrun)
for r in $(seq "$rounds"); do
  for t in "${tools[@]}"; do
    case $t in
    gorun) bin=$gorun ;;
    before) bin=$BEFORE ;;
    torchrun) bin=plain ;;
    esac
    run "round=$r $t" "$bin" | tee -a "$work/results"
  done
done
echo "== summary (medians over $rounds rounds)"
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "-") }'; }
for t in "${tools[@]}"; do
  line=$t
  for k in idle rss_mb pss_mb pss_mb_per_interpreter job_pss_mb; do
    line+=" ${k}_median=$(grep " $t idle=" "$work/results" | tr ' ' '\n' | sed -n "s/^$k=//p" | median)"
  done
  echo "$line"
done
