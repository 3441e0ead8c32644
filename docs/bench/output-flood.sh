#!/usr/bin/env bash
# Output under a flood, through the real gorun binary in local mode (torchrun,
# `gorun _rank`, the node agent, the head), two workers of flood_worker.py:
#   1. no line is lost, cut, duplicated or reordered: local rank 0 prints
#      numbered lines of checked lengths as fast as it can;
#   2. the flood does not slow the others: local rank 1 prints a timestamped
#      line every 10 ms, and floodcheck measures each line's latency (its
#      arrival at the reader of gorun's stdout minus its send time) with the
#      flood and without it (gorun_alone).
# Each flood style also runs with both workers writing straight into the
# reader's pipes, no gorun (raw_STYLE): the ceiling rate, and the latency that
# the machine's own contention gives. The machine is noisy: read the ratios.
#   usage: [GORUN=path] [STYLES="chunk print"] [CHUNK_LINES=3000000]
#          [PRINT_LINES=1000000] [TORCHRUN=cmd] [KEEP=dir] [PTY=1]
#          [GORUN_ARGS="--step-pattern off"] docs/bench/output-flood.sh
# GORUN_ARGS are more gorun flags. Each gorun phase also says the CPU time
# of gorun's own process (the head, not its agent or workers: read from
# /proc as it ends), head_cpu_ms.
# PTY=1 gives the workers pseudo-terminals, as when gorun's stdout and
# stderr are a terminal (GORUN_TTY, which gorun sets then; here gorun's
# stdout stays the pipe floodcheck reads), and the raw phases too (what a
# worker under plain torchrun writes into, on a terminal).
# STYLE chunk: ~64 KB writes cut inside lines (like seq or a buffered
# stdout); print: one write per line (print() under python -u).
# KEEP=dir keeps each phase's floodcheck JSON (every latency) and gorun's
# stderr there. Exits 1 when any line was lost, duplicated, reordered or
# garbled.
set -euo pipefail
cd "$(dirname "$0")/../.."
styles=${STYLES:-chunk print}
torchrun=${TORCHRUN:-$PWD/examples/testcluster/torchrun-debian-shim}
py=/usr/bin/python3
work=$(mktemp -d)
# shellcheck disable=SC2016 # expanded when the trap runs
trap 'if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$work"/*.json "$work"/gorun_* "$KEEP"/ 2>/dev/null; fi; rm -rf "$work"' EXIT
gorun=${GORUN:-}
if [ -z "$gorun" ]; then go build -o "$work/gorun" . && gorun=$work/gorun; fi
go build -o "$work/floodcheck" docs/bench/floodcheck/floodcheck.go
worker=$PWD/docs/bench/flood_worker.py
fc=$work/floodcheck
export QUIET_SECONDS=${QUIET_SECONDS:-3}
if [ "${PTY:-}" = 1 ]; then export GORUN_TTY=200x50:out,err; fi

# free_port: a port nobody listens on now (other torchruns may hold 29500).
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

lines_of() { case $1 in chunk) echo "${CHUNK_LINES:-3000000}" ;; print) echo "${PRINT_LINES:-1000000}" ;; esac; }

# gorun_phase NAME LINES [STYLE]: both workers under gorun, its stdout read
# by floodcheck; LINES=0 leaves local rank 0 idle.
gorun_phase() {
  local name=$1 n=$2 style=${3:-chunk} t0 rc
  mkdir -p "$work/$name"
  t0=$(date +%s%N)
  set +e
  rm -f "$work/$name.fcrc"
  # shellcheck disable=SC2086 # GORUN_ARGS: one flag a word
  BENCH_DIR=$work/$name FLOOD_LINES=$n FLOOD_STYLE=$style \
    "$gorun" ${GORUN_ARGS:-} --preflight off --torchrun "$torchrun" --nproc-per-node 2 --master-port "$(free_port)" --no-python "$py" "$worker" \
    2>"$work/$name/stderr" > >("$fc" read -name "$name" -flood-lines "$n" -out "$work/$name.json"; echo $? >"$work/$name.fcrc") &
  local pid=$! ticks=0 st
  # The head's own CPU: utime + stime from its stat, read until it is a
  # zombie (its last figures), before it is waited for.
  while st=$(cat "/proc/$pid/stat" 2>/dev/null); do
    st=${st##*) }
    read -r -a f <<<"$st"
    ticks=$((f[11] + f[12]))
    [ "${f[0]}" = Z ] && break
    sleep 0.02
  done
  wait "$pid"
  rc=($? 0)
  until [ -s "$work/$name.fcrc" ]; do sleep 0.02; done
  rc[1]=$(cat "$work/$name.fcrc")
  set -e
  echo "phase $name: $(((($(date +%s%N) - t0) / 1000000)))ms gorun_exit=${rc[0]} floodcheck_exit=${rc[1]} head_cpu_ms=$((ticks * 1000 / $(getconf CLK_TCK)))"
  if [ "${rc[0]}" != 0 ] || [ "${rc[1]}" != 0 ]; then
    tail -20 "$work/$name/stderr"
    exit 1
  fi
}

# raw_phase NAME LINES STYLE: the same workers, no gorun, each writing into a
# pipe of its own that floodcheck reads; with PTY=1 into a pseudo-terminal of
# its own (script(1), output processing and echo off, as gorun's), whose
# master script copies into that pipe: the ceiling is then a pty's.
raw_phase() {
  local name=$1 n=$2 style=$3 t0
  mkdir -p "$work/$name"
  t0=$(date +%s%N)
  export BENCH_DIR=$work/$name FLOOD_LINES=$n FLOOD_STYLE=$style
  if [ "${PTY:-}" = 1 ]; then
    "$fc" read -name "$name" -flood-lines "$n" -out "$work/$name.json" \
      <(LOCAL_RANK=0 exec script -qfec "stty -opost -echo; exec $py $worker" /dev/null </dev/null) \
      <(LOCAL_RANK=1 exec script -qfec "stty -opost -echo; exec $py $worker" /dev/null </dev/null)
  else
    "$fc" read -name "$name" -flood-lines "$n" -out "$work/$name.json" \
      <(LOCAL_RANK=0 exec "$py" "$worker") <(LOCAL_RANK=1 exec "$py" "$worker")
  fi
  unset BENCH_DIR FLOOD_LINES FLOOD_STYLE
  echo "phase $name: $(((($(date +%s%N) - t0) / 1000000)))ms"
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); torchrun: $torchrun"
gorun_phase gorun_alone 0
for s in $styles; do
  n=$(lines_of "$s")
  raw_phase "raw_$s" "$n" "$s"
  gorun_phase "gorun_$s" "$n" "$s"
done
echo "---"
# shellcheck disable=SC2086 # one argument per style
"$fc" summary "$work" $styles
