#!/usr/bin/env bash
# Head CPU per node on a generated cluster (one ssh_config entry and one
# known_hosts line per node), every node refusing the connection, so only
# the head's own work is left: reading its inputs, resolving each host,
# preparing host keys and auth, the refused connect, the error report.
#   usage: docs/bench/head-refused.sh [BEFORE_COMMIT]
# With BEFORE_COMMIT, the same measurements run on a tree of that commit
# (git archive) beside this one, alternating: the binary on 1,024 nodes,
# then BenchmarkDialAllRefused (sshexec/scale_bench_test.go, copied into
# the old tree) at 32, 256 and 1,024 nodes (4,096 only for this tree: the
# old code needs minutes there).
set -euo pipefail
cd "$(dirname "$0")/../.."
before=${1:-}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
go build -o "$work/gorun-now" . 2>/dev/null
if [ -n "$before" ]; then
  mkdir "$work/before"
  git archive "$before" | tar -x -C "$work/before"
  cp sshexec/scale_bench_test.go "$work/before/sshexec/"
  # The benchmark's helper takes a testing.TB (this tree's dial_test.go).
  sed -i 's/^func writeFile(t \*testing.T, /func writeFile(t testing.TB, /' "$work/before/sshexec/dial_test.go"
  (cd "$work/before" && go build -o "$work/gorun-before" . 2>/dev/null)
fi

n=1024
(cd "$work" && python3 - "$n" <<'EOF'
import sys
n = int(sys.argv[1])
key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
with open("F", "w") as c, open("hf", "w") as h, open("kh", "w") as k:
    for i in range(n):
        addr = f"127.0.{i // 250}.{i % 250 + 1}"
        c.write(f"Host n{i}\n  HostName {addr}\n  Port 1\n")
        h.write(f"n{i} slots=1\n")
        k.write(f"[{addr}]:1 {key}\n")
open("x.py", "w").write("print('hi')\n")
EOF
)

# launch BIN: CPU seconds (user+sys), wall seconds, stderr lines and bytes
launch() {
  (cd "$work" && HOME=$work /usr/bin/time -f "%U %S %e" -o "$work/time" \
    "$1" --ssh-config F --known-hosts kh --hostfile hf --preflight off x.py 2>"$work/err" >/dev/null) || true
  read -r u s e <"$work/time"
  # /usr/bin/time appends "Command exited with non-zero status" first
  read -r u s e < <(grep -E '^[0-9.]+ [0-9.]+ [0-9.]+$' "$work/time")
  printf '%-7s %4d nodes: cpu %6.2f s (%.3f ms/node), wall %6.2f s, stderr %d lines, %d bytes\n' \
    "$2" "$n" "$(echo "$u + $s" | bc)" "$(echo "($u + $s) * 1000 / $n" | bc -l)" "$e" \
    "$(wc -l <"$work/err")" "$(wc -c <"$work/err")"
}

echo "## gorun binary, $n nodes refusing (one ssh_config entry, one known_hosts line each)"
for round in 1 2; do
  [ -n "$before" ] && launch "$work/gorun-before" before
  launch "$work/gorun-now" now
done
echo "now, stderr:"; sed 's/^/  /' "$work/err"

echo "## BenchmarkDialAllRefused"
for round in 1 2; do
  if [ -n "$before" ]; then
    echo "# before ($before), round $round"
    (cd "$work/before" && go test -run '^$' -bench 'DialAllRefused/nodes=(32|256|1024)$' -benchtime 1x ./sshexec 2>/dev/null | grep Benchmark)
  fi
  echo "# now, round $round"
  go test -run '^$' -bench 'DialAllRefused' -benchtime 3x ./sshexec 2>/dev/null | grep Benchmark
done
