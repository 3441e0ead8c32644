#!/usr/bin/env bash
# A whole launch on N real netns nodes (default 200, one sshd each, on this
# machine) against pdsh, alternating, ROUNDS rounds: gorun's launch (ssh, the
# launcher that finds the node's gorun, the node agent, /bin/true as torchrun,
# teardown; --preflight off) vs pdsh -R ssh running `true` with ssh's own
# key exchange (OpenSSH 9.2 picks sntrup761x25519-sha512) and with gorun's
# (curve25519-sha256: OpenSSH 9.2 has no mlkem768x25519, x/crypto's first). Each launch
# also gives the CPU it cost: the launcher's own (the head's share) and the whole machine's.
# NODE_BASHRC=FILE: the nodes' sessions source FILE instead of ~/.bashrc (netns-cluster.sh),
# so that both launchers are timed apart from what the machine's rc files cost each session
# (on the dev machine, root's pyenv init: a rehash under one lock the nodes share).
#   usage: [NODE_BASHRC=FILE] docs/bench/launch-200.sh [N] [ROUNDS]   (root; tee the output)
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
if [ -n "${NODE_BASHRC:-}" ]; then
  echo "   the nodes' shell: every session sources NODE_BASHRC=$NODE_BASHRC ($(wc -l <"$NODE_BASHRC") lines) in place of ~/.bashrc, for both launchers"
else
  echo "   the nodes' shell: every session sources ~/.bashrc, which has $(grep -c '^[^#]*pyenv init' ~/.bashrc 2>/dev/null || echo 0) 'pyenv init' line(s) (a rehash under one lock in ~/.pyenv, which the nodes share)"
fi
"${gorun[@]}" >/dev/null 2>&1 || { echo "gorun's first launch failed:"; "${gorun[@]}" 2>&1 | tail -5; exit 1; }
# run NAME CMD...: one launch, timed; appends to $work/data-NAME "wall_ms head_cpu_ms all_cpu_ms"
# (not $work/NAME: $work/gorun is the binary); head_cpu is the launcher's own CPU and its children's (pdsh's ssh clients) on this machine;
# all_cpu is every CPU of the machine over the launch (/proc/stat), the nodes' sshd, shells
# and agents included: on one machine the nodes share the head's cores.
ticks() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat; }
hz=$(getconf CLK_TCK)
run() {
  local name=$1 t0 c0 c1 wall head
  shift
  c0=$(ticks) t0=$(ms)
  /usr/bin/time -f "%U %S" -o "$work/time" "$@" >/dev/null 2>&1 || true
  wall=$(($(ms) - t0)) c1=$(ticks)
  head=$(awk '{printf "%d", ($1 + $2) * 1000}' "$work/time")
  echo "$wall $head $(((c1 - c0) * 1000 / hz))" >>"$work/data-$name"
  echo "${name}_ms=$wall ${name}_head_cpu_ms=$head ${name}_all_cpu_ms=$(((c1 - c0) * 1000 / hz))"
}
col() { awk -v c="$2" '{print $c}' "$work/data-$1" | median; }
for r in $(seq "$rounds"); do
  sleep 5 # the last run's sessions end on the nodes
  g=$(run gorun "${gorun[@]}")
  sleep 5
  p=$(PDSH_SSH_ARGS_APPEND="-F $cfg" run pdsh pdsh -R ssh -w "node[0-$((n - 1))]" true)
  sleep 5
  k=$(PDSH_SSH_ARGS_APPEND="-F $cfg -o KexAlgorithms=curve25519-sha256" run pdsh_kex pdsh -R ssh -w "node[0-$((n - 1))]" true)
  echo "round=$r $g $p $k"
done
g=$(col gorun 1) p=$(col pdsh 1) k=$(col pdsh_kex 1)
echo "== medians over $rounds rounds: gorun_ms=$g pdsh_ms=$p pdsh_kex_ms=$k ratio_vs_pdsh=$(awk -v a="$g" -v b="$p" 'BEGIN{printf "%.2f", a/b}') ratio_vs_pdsh_kex=$(awk -v a="$g" -v b="$k" 'BEGIN{printf "%.2f", a/b}')"
for t in gorun pdsh pdsh_kex; do
  echo "== $t medians: head_cpu_ms=$(col $t 2) ($(awk -v c="$(col $t 2)" -v n="$n" 'BEGIN{printf "%.1f", c/n}') ms/node) all_cpu_ms=$(col $t 3) ($(awk -v c="$(col $t 3)" -v n="$n" 'BEGIN{printf "%.1f", c/n}') ms/node)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
