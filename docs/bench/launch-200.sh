#!/usr/bin/env bash
# A whole launch on N real netns nodes (default 200, one sshd each, on this
# machine) against pdsh, alternating, ROUNDS rounds: gorun's launch (ssh, the
# launcher that finds the node's gorun, the node agent, /bin/true as torchrun,
# teardown; --preflight off) vs pdsh -R ssh running `true` with ssh's own
# key exchange (OpenSSH 9.2 picks sntrup761x25519-sha512) and with gorun's
# (curve25519-sha256: OpenSSH 9.2 has no mlkem768x25519, x/crypto's first).
#   usage: docs/bench/launch-200.sh [N] [ROUNDS]   (root; tee the output)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200} rounds=${2:-5}
export PREFIX=gorunl SUBNET=10.81.0 STATE=/tmp/gorun-launch-bench
cluster=examples/testcluster/netns-cluster.sh
work=$(mktemp -d)
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$work"' EXIT
go build -o "$work/gorun" .
"$cluster" up "$n" >/dev/null 2>&1
cfg=$STATE/ssh_config
hosts="" && for ((i = 0; i < n; i++)); do hosts+="${hosts:+,}node$i:1"; done
ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
gorun=("$work/gorun" --ssh-config "$cfg" --preflight off --hosts "$hosts" --torchrun /bin/true x)
tree=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . 2>/dev/null || tree+=" (uncommitted changes)"
echo "== launch on $n netns nodes: $tree, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "   gorun: ${gorun[*]:0:5} --hosts node0:1,...,node$((n - 1)):1 --torchrun /bin/true x"
echo "   pdsh:  PDSH_SSH_ARGS_APPEND=\"-F $cfg\" pdsh -R ssh -w node[0-$((n - 1))] true   (pdsh's default fan-out, 32)"
echo "   pdsh_kex: the same with -o KexAlgorithms=curve25519-sha256"
echo "   the nodes' shell: every session sources ~/.bashrc, which has $(grep -c '^[^#]*pyenv init' ~/.bashrc 2>/dev/null || echo 0) 'pyenv init' line(s) (a rehash under one lock in ~/.pyenv, which the nodes share)"
"${gorun[@]}" >/dev/null 2>&1 || { echo "gorun's first launch failed:"; "${gorun[@]}" 2>&1 | tail -5; exit 1; }
: >"$work/g"; : >"$work/p"; : >"$work/k"
for r in $(seq "$rounds"); do
  t0=$(ms); "${gorun[@]}" >/dev/null 2>&1; g=$(($(ms) - t0)); echo "$g" >>"$work/g"
  t0=$(ms); PDSH_SSH_ARGS_APPEND="-F $cfg" pdsh -R ssh -w "node[0-$((n - 1))]" true >/dev/null 2>&1; p=$(($(ms) - t0)); echo "$p" >>"$work/p"
  t0=$(ms); PDSH_SSH_ARGS_APPEND="-F $cfg -o KexAlgorithms=curve25519-sha256" pdsh -R ssh -w "node[0-$((n - 1))]" true >/dev/null 2>&1; k=$(($(ms) - t0)); echo "$k" >>"$work/k"
  echo "round=$r gorun_ms=$g pdsh_ms=$p pdsh_kex_ms=$k"
done
g=$(median <"$work/g") p=$(median <"$work/p") k=$(median <"$work/k")
echo "== medians over $rounds rounds: gorun_ms=$g pdsh_ms=$p pdsh_kex_ms=$k ratio_vs_pdsh=$(awk -v a="$g" -v b="$p" 'BEGIN{printf "%.2f", a/b}') ratio_vs_pdsh_kex=$(awk -v a="$g" -v b="$k" 'BEGIN{printf "%.2f", a/b}')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
