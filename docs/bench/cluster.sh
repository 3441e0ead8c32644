#!/usr/bin/env bash
# Cluster benchmarks on a real netns cluster (root): fan-out vs pdsh, head
# RSS while supervising 32 nodes, and failure handling vs plain torchrun.
# Ratios are measured side by side in one run; the machine is noisy.
#   usage: docs/bench/cluster.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
export PREFIX=gorunb SUBNET=10.79.0 STATE=/tmp/gorun-bench-cluster
cluster=examples/testcluster/netns-cluster.sh
work=$(mktemp -d)
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$work"' EXIT
go build -o "$work/gorun" .
"$cluster" up 32 2>/dev/null
ssh_cfg=$STATE/ssh_config
gorun=("$work/gorun" --ssh-config "$ssh_cfg" --preflight off)
ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
hosts() { local n=$1 s="" i; for ((i = 0; i < n; i++)); do s+="${s:+,}node$i:1"; done; echo "$s"; }

echo "== fan-out layer: sshexec.DialAll + Output(true) vs pdsh -R ssh, go test -bench (ms/op)"
GORUN_TESTCLUSTER=$STATE go test -run '^$' -bench Fanout -benchtime "${rounds}x" ./sshexec 2>/dev/null |
  awk '/^BenchmarkFanout\// { split($1, a, "/"); n = a[3]; sub(/-[0-9]+$/, "", n); ms[a[2] " " n] = $3 / 1e6; ns[n] = 1 }
       END { for (n in ns) printf "%s gorun_ms=%.0f pdsh_ms=%.0f ratio=%.2f\n", n, ms["gorun " n], ms["pdsh " n], ms["gorun " n] / ms["pdsh " n] }' | sort -t= -k2 -n

echo "== launch fan-out: connect + run a trivial command on N nodes (median of $rounds, ms)"
echo "   gorun: the full launch path (ssh, the launcher finding the node's gorun, agent, job) with /bin/true as torchrun"
echo "   gorun_installed: the same with --remote-gorun (an installed gorun: no launcher)"
echo "   pdsh:  pdsh -R ssh -w node[0-(N-1)] true"
"${gorun[@]}" --hosts "$(hosts 32)" --torchrun /bin/true x >/dev/null 2>&1 # upload once
installed=$(ls -t "$HOME"/.cache/gorun/gorun-* | head -1)
for n in 1 4 16 32; do
  : >"$work/g"; : >"$work/i"; : >"$work/p"
  for _ in $(seq "$rounds"); do
    t0=$(ms); "${gorun[@]}" --hosts "$(hosts "$n")" --torchrun /bin/true x >/dev/null 2>&1; echo $(($(ms) - t0)) >>"$work/g"
    t0=$(ms); "${gorun[@]}" --remote-gorun "$installed" --hosts "$(hosts "$n")" --torchrun /bin/true x >/dev/null 2>&1; echo $(($(ms) - t0)) >>"$work/i"
    t0=$(ms); PDSH_SSH_ARGS_APPEND="-F $ssh_cfg" pdsh -R ssh -f 64 -w "node[0-$((n - 1))]" true >/dev/null 2>&1; echo $(($(ms) - t0)) >>"$work/p"
  done
  g=$(median <"$work/g"); i=$(median <"$work/i"); p=$(median <"$work/p")
  echo "nodes=$n gorun_ms=$g gorun_installed_ms=$i pdsh_ms=$p ratio=$(awk -v g="$g" -v p="$p" 'BEGIN{printf "%.2f", g/p}') ratio_installed=$(awk -v g="$i" -v p="$p" 'BEGIN{printf "%.2f", g/p}')"
done

echo "== head RSS while supervising 32 nodes (10 lines/s each for 10 s)"
/usr/bin/time -f "max_rss_kb=%M wall_s=%e" "${gorun[@]}" --hosts "$(hosts 32)" \
  --torchrun "$PWD/docs/bench/fake-torchrun" x 2>&1 >/dev/null | tail -1

echo "== failure: worker rank 3 (node1) crashes; 2 nodes x 2 real torchrun + gloo DDP"
stamp() { while IFS= read -r l; do echo "$(ms) $l"; done; }
STEPS=100000 STEP_SLEEP=0.1 "$work/gorun" --ssh-config "$ssh_cfg" --hosts node0:2,node1:2 \
  --torchrun "$PWD/examples/testcluster/torchrun-debian-shim" --max-restarts 1 \
  --env CRASH_RANK=3 --env CRASH_ON_ATTEMPT=0 --env CRASH_STEP=20 --env STEPS=40 --env STEP_SLEEP=0.1 \
  "$PWD/examples/testcluster/train_ddp.py" 2>&1 | stamp >"$work/f" || true
crash=$(grep -m1 'CRASH on purpose' "$work/f" | cut -d' ' -f1)
gone=$(grep -m1 'restarting the whole group' "$work/f" | cut -d' ' -f1)
next=$(grep -m1 'ready attempt=1' "$work/f" | cut -d' ' -f1)
echo "gorun: crash line -> every process of the attempt gone on both nodes: $((gone - crash)) ms; -> first line of attempt 2: $((next - crash)) ms"

echo "== the same failure under plain torchrun on each node (static rendezvous, no supervisor; cap 60 s)"
# Through ssh, as a user would run it; ssh's own exit closes the pipe even
# if workers outlive torchrun on the node.
for i in 0 1; do
  (timeout 60 ssh -F "$ssh_cfg" "node$i" env CRASH_RANK=3 CRASH_STEP=20 STEPS=40 STEP_SLEEP=0.1 \
    "$PWD/examples/testcluster/torchrun-debian-shim" --nnodes=2 --nproc_per_node=2 --node_rank=$i \
    --master_addr=$SUBNET.10 --master_port=29500 "$PWD/examples/testcluster/train_ddp.py" 2>&1 | stamp >"$work/t$i" || true
   echo "$(ms) EXIT" >>"$work/t$i") &
done
wait
crash=$(cat "$work/t0" "$work/t1" | grep -m1 'CRASH on purpose' | cut -d' ' -f1)
for i in 0 1; do
  echo "plain torchrun node$i: exited $(($(grep ' EXIT$' "$work/t$i" | cut -d' ' -f1) - crash)) ms after the crash line (nothing restarts the job)"
done
sleep 2
left=$(pgrep -fc "torchrun-debian-shim|train_ddp.py" || true)
echo "plain torchrun: $left processes of the job (torchrun or workers) still running after both ssh sessions ended"
pkill -9 -f "torchrun-debian-shim|train_ddp.py" || true
