#!/usr/bin/env bash
# What starting the gorun binary costs, against a Go hello-world and /bin/true, alternating,
# ROUNDS rounds of N runs each: every worker's supervisor (gorun _rank), every node agent and
# every node check is such a start. Prints microseconds a run (wall, through bash's fork and
# exec) and the package initialisers' own time (GODEBUG=inittrace=1, summed: ours, third
# party, standard library).
# With BEFORE=path, that gorun binary (an older build) takes its turn in every round too.
#   usage: [ROUNDS=3] [N=200] [GORUN=path] [BEFORE=path] docs/bench/process-start.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3} n=${N:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gorun=${GORUN:-}
if [ -z "$gorun" ]; then go build -o "$work/gorun" . && gorun=$work/gorun; fi
mkdir "$work/hello"
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hi\\n") }\n' >"$work/hello/main.go"
printf 'module hello\n\ngo 1.21\n' >"$work/hello/go.mod"
(cd "$work/hello" && go build -o "$work/hello-bin" .)
us() { # us CMD...: microseconds a run, over $n runs
  local t0 t1 i
  t0=$(date +%s%N)
  for ((i = 0; i < n; i++)); do "$@" >/dev/null; done
  t1=$(date +%s%N)
  echo $(((t1 - t0) / n / 1000))
}
echo "== process start: $(git rev-parse --short HEAD), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "   gorun: $gorun ($(stat -c %s "$gorun") bytes); hello: a Go hello-world ($(stat -c %s "$work/hello-bin") bytes)"
[ -z "${BEFORE:-}" ] || echo "   before: $BEFORE ($(stat -c %s "$BEFORE") bytes)"
for ((r = 1; r <= rounds; r++)); do
  row="round=$r gorun_version_us=$(us "$gorun" version)"
  [ -z "${BEFORE:-}" ] || row+=" before_version_us=$(us "$BEFORE" version)"
  echo "$row hello_us=$(us "$work/hello-bin") true_us=$(us /bin/true)"
done
inits() { # inits LABEL BINARY
  GODEBUG=inittrace=1 "$2" version 2>&1 >/dev/null | awk -v r="$r" -v l="$1" '/^init /{c=$5; p=$2; if (p ~ /gorun\/gorun/) g+=c; else if (p ~ /\./) t+=c; else s+=c} END{printf "inits %s round=%d ours_ms=%.2f third_party_ms=%.2f std_ms=%.2f\n", l, r, g, t, s}'
}
for ((r = 1; r <= rounds; r++)); do
  inits gorun "$gorun"
  [ -z "${BEFORE:-}" ] || inits before "$BEFORE"
done
