#!/usr/bin/env bash
# Launch -> first worker line, gorun reaching the nodes over srun vs over ssh: the same 3
# nodes, the same job, the same allocation, alternating in one run (the machine is noisy:
# compare the two columns, not the absolute times).
#
# The nodes are a slurm-cluster.sh cluster made with NODE_SSHD=1, so every node namespace
# runs a real sshd (its pid 1) beside its slurmd: srun and ssh reach the very same nodes
# (the Slurm e2e tests' cluster has no sshd; this one adds it for the comparison only).
# One salloc -N3 --ntasks-per-node=2 from this machine holds the allocation; inside it, each
# round runs, in turn,
#   srun: gorun --nproc-per-node 2 --torchrun SHIM --env STARTUP_SLEEP=0 train_ddp.py
#         (no --hosts inside an allocation: the nodes' agents are srun steps)
#   ssh:  the same command with --launcher ssh --ssh-config STATE/ssh_config
#         (same nodes, from SLURM_JOB_NODELIST; agents over SSH sessions)
# Both with preflight on (the default), gorun on the shared filesystem (srun finds it there
# by content; ssh uploads it to ~/.cache/gorun once, in the warm-up round, not counted).
# first_ms: from starting gorun to its first worker line ("[nodeN r] ... starting", printed
# by train_ddp.py before init_process_group); total_ms: to gorun's exit (6 ranks in sync).
# Python importing torch (preflight's check, torchrun, the workers: 9 imports at once on 3
# nodes) dominates that job on 2 cores, so each round also times the launch path alone:
#   srun-bare / ssh-bare: gorun --preflight off --torchrun /bin/echo x (echo's line, per node,
#   is the "worker" line: transport, agent, job start, nothing else).
#   usage: docs/bench/slurm-vs-ssh.sh [ROUNDS]      (root; the Slurm and ssh packages)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

if [ "${1:-}" = inner ]; then
  # Inside the allocation: the measurements.
  rounds=$2 gorun=$3 work=$4
  job=(--nproc-per-node 2 --torchrun "$repo/examples/testcluster/torchrun-debian-shim"
    --env STARTUP_SLEEP=0 "$repo/examples/testcluster/train_ddp.py")
  ssh_opts=(--launcher ssh --ssh-config "$STATE/ssh_config")
  bare=(--preflight off --torchrun /bin/echo x)
  # measure LABEL ARGS...: one run of gorun ARGS; prints LABEL first_ms total_ms. The first
  # line is a worker's ("[node1 0] ...") for the DDP job, echo's ("[node1] ...") for bare.
  measure() {
    local label=$1 t0 t1="" t2 line rc ok=0 first='^\[node[0-9]+ [0-9]+( r[0-9]+)?\] ' done='params-in-sync OK' want=6
    shift
    if [[ $label == *-bare ]]; then first='^\[node[0-9]+\] .*--nnodes' done='--nnodes' want=3; fi
    t0=$(date +%s%N)
    while IFS= read -r line; do
      if [ -z "$t1" ] && [[ $line =~ $first ]]; then t1=$(date +%s%N); fi
      [[ $line != *"$done"* ]] || ok=$((ok + 1))
      echo "$line" >>"$work/$label.log"
    done < <(NO_COLOR=1 "$gorun" "$@" 2>&1)
    t2=$(date +%s%N)
    wait $! && rc=0 || rc=$?
    if [ "$rc" != 0 ] || [ "$ok" != "$want" ] || [ -z "$t1" ]; then
      echo "$label: exit $rc, $ok of $want lines saying $done; output in $work/$label.log" >&2
      tail -20 "$work/$label.log" >&2
      exit 1
    fi
    echo "$label first_ms=$(((t1 - t0) / 1000000)) total_ms=$(((t2 - t0) / 1000000))"
  }
  echo "== warm-up (not counted): one run each"
  measure srun "${job[@]}" >/dev/null
  measure ssh "${ssh_opts[@]}" "${job[@]}" >/dev/null
  echo "== $rounds rounds, srun then ssh in each, the DDP job then the bare launch"
  for r in $(seq "$rounds"); do
    echo "round=$r $(measure srun "${job[@]}")"
    echo "round=$r $(measure ssh "${ssh_opts[@]}" "${job[@]}")"
    echo "round=$r $(measure srun-bare "${bare[@]}")"
    echo "round=$r $(measure ssh-bare "${ssh_opts[@]}" "${bare[@]}")"
  done
  exit 0
fi

rounds=${1:-7}
export PREFIX=gorun-sb SUBNET=10.81.0 STATE=/tmp/gorun-bench-slurm SLURMCTLD_PORT=6837 NODE_SSHD=1
cluster=$repo/examples/testcluster/slurm-cluster.sh # absolute: the trap runs after the cd below
work=$(mktemp -d /tmp/gorun-bench-XXXXXX) # under /tmp: the nodes share the filesystem
trap '"$cluster" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
go build -o "$work/gorun" .
echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$cluster" up 3 2>&1 | sed -n 's/^slurm-cluster: //p'
export SLURM_CONF=$STATE/slurm.conf
for i in 0 1 2; do
  echo "node$i: $(ip netns pids "$PREFIX-node$i" | xargs -r ps -o comm= -p | sort | tr '\n' ' ')"
done
cd "$work" # jobs start in the submit directory: not under $STATE
salloc --quiet -N 3 --ntasks-per-node=2 bash "$repo/docs/bench/slurm-vs-ssh.sh" inner "$rounds" "$work/gorun" "$work" |
  tee "$work/rows"

echo "== summary (ms; ratio = srun / ssh)"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
col() { awk -v l="$1" -v k="$2" '$2 == l { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$work/rows"; }
for row in "first_ms " "total_ms " "first_ms -bare" "total_ms -bare"; do
  k=${row% *} v=${row#* }
  s_min=$(col srun$v $k | sort -n | head -1); s_med=$(col srun$v $k | median)
  h_min=$(col ssh$v $k | sort -n | head -1); h_med=$(col ssh$v $k | median)
  echo "${v:+bare }$k srun_min=$s_min srun_median=$s_med ssh_min=$h_min ssh_median=$h_med" \
    "ratio_min=$(awk -v a="$s_min" -v b="$h_min" 'BEGIN{printf "%.2f", a/b}')" \
    "ratio_median=$(awk -v a="$s_med" -v b="$h_med" 'BEGIN{printf "%.2f", a/b}')"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
