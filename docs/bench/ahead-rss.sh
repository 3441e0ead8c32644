#!/usr/bin/env bash
# What the hand-off ahead holds while an attempt runs: the resident memory of each node's
# standby (its agent, torchrun's interpreter and what it started) during a local 2-rank job
# with a restart left, gorun against another build (BEFORE, one whose standby waits idle:
# torchrun imported, its main not run), alternating, ROUNDS each.
#
#   usage: [GORUN=path] [BEFORE=path] [ROUNDS=3] [NPROC=2] [TORCHRUN=cmd] docs/bench/ahead-rss.sh
#
# Each run: examples/testcluster/train_ddp.py on NPROC ranks (STEPS=150, STEP_SLEEP=0.2),
# --max-restarts 1 --prewarm off (the workers' pool has its own figure:
# docs/bench/pool-memory.sh). Once the standby's interpreter is there (and, with the hand-off
# ahead, its workers' supervisors at their gate) and 5 s more have passed, VmRSS (kB) is read
# (and Pss) from /proc for: the standby's agent (`gorun _agent` whose child is warm.py), torchrun's
# interpreter (warm.py) and each of its children (the gated `gorun _rank`s). Then the run is
# stopped with SIGINT, and every process of it must be gone within 10 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
rounds=${ROUNDS:-3} nproc=${NPROC:-2}
torchrun=${TORCHRUN:-$repo/examples/testcluster/torchrun-debian-shim}
work=$(mktemp -d /tmp/gorun-ahead-rss-XXXXXX)
trap 'pkill -INT -f -- "--tag $work" 2>/dev/null || true; sleep 1; rm -rf "$work"' EXIT
gorun=${GORUN:-}
if [ -z "$gorun" ]; then go build -o "$work/gorun" . && gorun=$work/gorun; fi
gorun=$(realpath "$gorun")
before=${BEFORE:+$(realpath "$BEFORE")}

rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# pss: the proportional share (shared pages, such as gorun's own text, split between the
# processes that map them), from smaps_rollup
pss() { awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }

# measure TOOL BIN: one run, one line of figures
measure() {
  local tool=$1 bin=$2 tag="$work/$1-$RANDOM" pid warm agent kids k line total t0
  STEPS=150 STEP_SLEEP=0.2 "$bin" --torchrun "$torchrun" --preflight off --prewarm off --nproc-per-node "$nproc" \
    --max-restarts 1 "$repo/examples/testcluster/train_ddp.py" --tag "$tag" >"$tag.log" 2>&1 &
  pid=$!
  warm=""
  for ((t0 = 0; t0 < 600; t0++)); do # up to 60 s for the standby's interpreter
    for w in $(pgrep -f 'gorun-warm-[^ ]*/warm.py script' || true); do
      if [ "$(ps -o ppid= -p "$(ps -o ppid= -p "$w" | tr -d ' ')" 2>/dev/null | tr -d ' ')" = "$pid" ]; then warm=$w; fi
    done
    [ -n "$warm" ] && break
    sleep 0.1
  done
  [ -n "$warm" ] || { echo "$tool: no standby found"; kill -INT "$pid"; wait "$pid" || true; return; }
  sleep 5
  agent=$(ps -o ppid= -p "$warm" | tr -d ' ')
  kids=$(pgrep -P "$warm" || true)
  line="$tool agent_kb=$(rss "$agent") torchrun_kb=$(rss "$warm")"
  total=$(($(rss "$agent") + $(rss "$warm")))
  local n=0 each="" eachp="" totalp=$(($(pss "$agent") + $(pss "$warm")))
  for k in $kids; do
    n=$((n + 1)) each+="$(rss "$k"),"  eachp+="$(pss "$k"),"
    total=$((total + $(rss "$k"))) totalp=$((totalp + $(pss "$k")))
  done
  line+=" children=$n children_kb=${each%,} children_pss_kb=${eachp%,} standby_total_kb=$total standby_total_pss_kb=$totalp"
  line+=" children_cmd=$( [ -n "$kids" ] && ps -o args= -p "$(echo "$kids" | head -1)" | awk '{ print $2 }' || echo -)"
  kill -INT "$pid"
  wait "$pid" || true
  sleep 0.5
  local left
  left=$(pgrep -f -- "$tag" || true)
  [ -z "$left" ] || line+=" LEFT=$(echo $left | tr ' ' ,)"
  echo "$line"
}

echo "== ahead-rss.sh: $(date -u +%FT%TZ) $(git log -1 --format=%h)$(git diff --quiet || echo ' (uncommitted changes)'), $(nproc) cores"
echo "   ROUNDS=$rounds NPROC=$nproc gorun=$gorun before=${before:--}"
for ((r = 1; r <= rounds; r++)); do
  echo "round=$r $(measure gorun "$gorun")"
  [ -z "$before" ] || echo "round=$r $(measure before "$before")"
done
