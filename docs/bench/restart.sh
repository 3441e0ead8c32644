#!/usr/bin/env bash
# Restart: a worker crashes on the first attempt; how long until the next attempt's workers
# run, gorun against plain torchrun, alternating in one run (the machines are noisy: compare
# the columns of one run, not runs).
#
#   usage: [ROUNDS=5] [NPROC=2] [CRASH_AFTER=5] [PREFLIGHT=off|on] [PREWARM=torch] [GORUN=path]
#          [BEFORE=path [BEFORE_ARGS=args]] [TORCHRUN_SSH=1] [TORCHRUN=cmd] [PYTHON=path] docs/bench/restart.sh local|ssh|slurm|device
#
# "gorun" is gorun with its defaults (the warm standby torchrun on, the worker pool where
# --prewarm auto starts one). With PREWARM=VALUE another launcher takes its turn in every
# round: gorun --prewarm VALUE (the "prewarm" rows: torch or auto, the pool; off, none). With
# BEFORE=path another: that gorun binary (an older build, say) with gorun's arguments (the
# "before" rows; BEFORE_ARGS, more of its options), so a change is measured against what it
# changes in the same run.
#
# The job: docs/bench/restart_worker.py, NPROC ranks per node, --monitor_interval 0.1
# --max_restarts 1 for both launchers. On attempt 0 (TORCHELASTIC_RESTART_COUNT) every rank
# imports torch, writes time.time() and exits 1 (os._exit); on attempt 1 every rank writes
# time.time() as the script's first statement (before `import torch`) and again right after
# `import torch`, then exits 0. One file per rank and event, all on one machine's clock.
# Per run, from the earliest crash:
#   start_all_ms    to the LATEST attempt-1 first statement: every worker's interpreter is up
#                   (the headline figure)
#   start_first_ms  to the earliest attempt-1 first statement
#   import_all_ms / import_first_ms   the same to the line after `import torch`
#   seen_ms         to the launcher's line naming the failure (torchrun: "failed (exitcode";
#                   gorun: "stopping every node"), as this script reads it from the pipe
#   gone_ms         gorun only: to "restarting the whole group", printed once every process
#                   of the attempt is gone (then gorun's 1 s pause, then a fresh torchrun)
#   torchrun_up_ms  gorun only: to the first "Setting OMP_NUM_THREADS" banner of the next
#                   attempt's torchrun (printed once it has imported torch and read its
#                   arguments, and only when it sets OMP_NUM_THREADS: "-" otherwise)
#   launch_import_all_ms   from the launch (not the crash) to the LATEST attempt-0 line after
#                   `import torch`: a first start, every rank past its import
#   total_ms        the whole run, launch to exit
# Under each gorun row, its own restart line: the phases of the restart by gorun's clock.
# Modes (first argument):
#   local   both on this machine: TORCHRUN (default examples/testcluster/torchrun-debian-shim,
#           for Debian's python3-torch 1.13 torchrun) vs gorun --torchrun TORCHRUN, local mode
#   ssh     gorun --hosts node0:NPROC,... over the netns test cluster (NODES nodes, default
#           3; STATE, PREFIX, SUBNET as examples/testcluster/netns-cluster.sh takes them)
#           against plain torchrun's local figure in the same run. With TORCHRUN_SSH=1 one
#           more launcher takes its turn (the "torchrun_ssh" rows): what a user does without
#           gorun, torchrun started on every node over ssh at once (--nnodes NODES, the c10d
#           rendezvous at node0), which restarts the group across nodes by itself; the
#           summary's gorun_ssh_ratio (and prewarm_, before_) is that launcher's median over
#           torchrun_ssh's
#   slurm   gorun inside `salloc -N NODES --ntasks-per-node=NPROC` on the Slurm test cluster
#           (examples/testcluster/slurm-cluster.sh; its STATE, PREFIX, SUBNET), its agents as
#           srun steps, against torchrun's local figure in the same run
#   device  a GPU machine (no cluster): like local with TORCHRUN=torchrun, PYTHON=python3;
#           the output belongs under docs/device/h200-1gpu/restart/ (NPROC=2 on one GPU is
#           fine: the workers never touch it)
# ssh and slurm bring their cluster up when none is there (root), and down on exit only if
# they brought it up; a cluster of that PREFIX that is there but does not answer is left
# alone (the script stops). gorun runs with --preflight off unless PREFLIGHT=on, telemetry
# at its default. PYTHON is the workers' interpreter for both launchers (exported as
# PYTHON_EXEC, which torchrun and gorun's _rank both honour). One warm-up run of each comes
# first, not counted. Every run is bounded (RUN_TIMEOUT, default 120 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
export LC_ALL=C # EPOCHREALTIME and printf with a '.' decimal point

mode=${1:-}
rounds=${ROUNDS:-5} nproc=${NPROC:-2} nodes=${NODES:-3} limit=${RUN_TIMEOUT:-120}
preflight=${PREFLIGHT:-off}
case $mode in
local | ssh | slurm)
  torchrun=${TORCHRUN:-$repo/examples/testcluster/torchrun-debian-shim} python=${PYTHON:-/usr/bin/python3} ;;
device)
  torchrun=${TORCHRUN:-torchrun} python=${PYTHON:-python3} ;;
*)
  sed -n '6,7p' "$0" >&2
  exit 2
  ;;
esac
python=$(command -v "$python") || { echo "restart.sh: no python $python" >&2; exit 2; }
export PYTHON_EXEC=$python
# Attempt 0 trains this long before its crash (restart_worker.py); 0 is a start-up crash.
export CRASH_AFTER=${CRASH_AFTER:-5}

# Cluster modes: their nodes see this machine's /tmp (one filesystem), so the work dir is
# there; gorun, the worker and its files are reached at the same paths on every node.
work=$(mktemp -d /tmp/gorun-restart-XXXXXX)
child="" brought=0 cluster=""
cleanup() {
  local pids
  if [ -n "$child" ]; then kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null || true; fi
  sleep 0.2
  pids=$(pgrep -f -- "$work/" || true) # anything still running the worker or gorun from $work
  if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
  if [ "$brought" = 1 ]; then "$cluster" down >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gorun=${GORUN:-}
if [ -z "$gorun" ]; then go build -o "$work/gorun" . && gorun=$work/gorun; fi
gorun=$(realpath "$gorun")
cp docs/bench/restart_worker.py "$work/worker.py"

hosts=""
case $mode in
ssh)
  export STATE=${STATE:-/tmp/gorun-testcluster} PREFIX=${PREFIX:-gorun}
  cluster=$repo/examples/testcluster/netns-cluster.sh
  answers() {
    local i
    [ -f "$STATE/ssh_config" ] || return 1
    for ((i = 0; i < nodes; i++)); do
      timeout 15 ssh -F "$STATE/ssh_config" -o BatchMode=yes -o ConnectTimeout=5 "node$i" true </dev/null || return 1
    done
  }
  for ((i = 0; i < nodes; i++)); do hosts+="${hosts:+,}node$i:$nproc"; done
  ;;
slurm)
  export STATE=${STATE:-/tmp/gorun-slurm-cluster} PREFIX=${PREFIX:-gorun-slurm}
  export SLURM_CONF=$STATE/slurm.conf
  cluster=$repo/examples/testcluster/slurm-cluster.sh
  answers() {
    local idle
    [ -f "$SLURM_CONF" ] || return 1
    idle=$(timeout 15 sinfo -h -N -t idle,mixed -o %N 2>/dev/null | sort -u | wc -l) || return 1
    [ "$idle" -ge "$nodes" ]
  }
  ;;
esac
if [ -n "$cluster" ] && ! answers; then
  if ip netns list 2>/dev/null | grep -q "^$PREFIX-node"; then
    echo "restart.sh: a cluster $PREFIX is there but $nodes nodes of it do not answer (STATE=$STATE); leaving it alone" >&2
    exit 1
  fi
  brought=1
  "$cluster" up "$nodes" >/dev/null 2>"$work/cluster-up.log" || { cat "$work/cluster-up.log" >&2; exit 1; }
  answers || { echo "restart.sh: the cluster came up but does not answer" >&2; exit 1; }
fi

job=(--nproc_per_node "$nproc" --monitor_interval 0.1 --max_restarts 1)
# free_port: a port free on this machine now, for the local runs' store (another session's
# job on 29500 must not fail this one's rendezvous)
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# cmd TOOL DIR: the command of one run into the array c (and the world size into world)
cmd() {
  local tool=$1 dir=$2
  world=$nproc
  local extra=() bin=$gorun
  if [ "$tool" = prewarm ]; then tool=gorun extra=(--prewarm "$PREWARM"); fi
  if [ "$tool" = before ]; then tool=gorun bin=$BEFORE; read -ra extra <<<"${BEFORE_ARGS:-}"; fi
  case $tool in
  torchrun) c=("$torchrun" "${job[@]}" --master_port "$(free_port)" "$work/worker.py" "$dir") ;;
  torchrun_ssh)
    local node0 remote h hs=()
    node0=$(awk '$1 == "Host" { f = ($2 == "node0") } f && $1 == "HostName" { print $2; exit }' "$STATE/ssh_config")
    remote="cd $work && PYTHON_EXEC=$python CRASH_AFTER=$CRASH_AFTER exec $torchrun ${job[*]} --nnodes $nodes"
    remote+=" --rdzv_backend c10d --rdzv_endpoint $node0:$(free_port) --rdzv_id $(basename "$dir") $work/worker.py $dir"
    for ((h = 0; h < nodes; h++)); do hs+=("node$h"); done
    # one ssh per node at once; the run ends when every node's torchrun has
    c=(bash -c 'for h in "${@:3}"; do ssh -F "$1" -o BatchMode=yes "$h" "$2" </dev/null & done
rc=0; for j in $(jobs -p); do wait "$j" || rc=$?; done; exit $rc' _ "$STATE/ssh_config" "$remote" "${hs[@]}")
    world=$((nproc * nodes))
    ;;
  gorun)
    c=("$bin" --torchrun "$torchrun" --preflight "$preflight" "${extra[@]}")
    case $mode in
    local | device) c+=("${job[@]}" --master_port "$(free_port)") ;;
    ssh) c+=(--ssh-config "$STATE/ssh_config" --hosts "$hosts" --env "PYTHON_EXEC=$python" --env "CRASH_AFTER=$CRASH_AFTER" "${job[@]}"); world=$((nproc * nodes)) ;;
    slurm)
      c=(salloc --quiet -N "$nodes" --ntasks-per-node="$nproc" "${c[@]}" --env "PYTHON_EXEC=$python" --env "CRASH_AFTER=$CRASH_AFTER" "${job[@]}")
      world=$((nproc * nodes))
      ;;
    esac
    c+=("$work/worker.py" "$dir")
    ;;
  esac
}

# Each output line with the time this script read it (epoch seconds), inside the timeout's
# process group so that a kill reaches the launcher and the reader alike.
stamped='set -o pipefail; "$@" 2>&1 | while IFS= read -r l; do printf "%s %s\n" "$EPOCHREALTIME" "$l"; done'
# lo_hi FILES...: the earliest and latest time in the files, and how many there are
lo_hi() { [ $# -gt 0 ] || { echo "- - 0"; return; }; sort -g "$@" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo, hi, NR }'; }
ms() { [ "$1" != - ] && [ -n "$2" ] && [ "$2" != - ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }' || echo -; }
# line_at DIR REGEX [AFTER]: when the first line of the run's output matching REGEX (after the
# first line matching AFTER) was read
line_at() {
  awk -v re="$2" -v after="${3:-}" 'after == "" || seen { if ($0 ~ re) { print $1; exit } } after != "" && $0 ~ after { seen = 1 }' "$1/log"
}

# measure LABEL TOOL: one run; prints LABEL TOOL and its figures (key=ms)
measure() {
  local label=$1 tool=$2 dir t0 t1 rc pids n
  dir=$work/${label/=/}-$tool # round1-gorun: every process of the run has it as its last argument
  mkdir -p "$dir"
  cmd "$tool" "$dir"
  (cd "$work" && exec timeout -k 5 "$limit" bash -c "$stamped" _ "${c[@]}") >"$dir/log" 2>&1 &
  child=$!
  t0=$EPOCHREALTIME
  wait "$child" && rc=0 || rc=$?
  t1=$EPOCHREALTIME child=""
  # whatever outlives its launcher is named, then stopped
  for n in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(pgrep -f -- "$dir\$" || true)
    [ -n "$pids" ] || break
    sleep 0.2
  done
  if [ -n "$pids" ]; then
    echo "$label $tool: $(wc -w <<<"$pids") processes left 2 s after the launcher's exit, killed: $(ps -o pid=,args= -p ${pids//$'\n'/,} | cut -c1-120 | tr '\n' ';')"
    kill -KILL $pids 2>/dev/null || true
  fi
  shopt -s nullglob
  local crash _ sf sa ns imf ima ni seen gone up row
  read -r crash _ _ < <(lo_hi "$dir"/crash-a0-r*)
  read -r sf sa ns < <(lo_hi "$dir"/start-a1-r*)
  read -r imf ima ni < <(lo_hi "$dir"/import-a1-r*)
  local _l0 l0all _n0
  read -r _l0 l0all _n0 < <(lo_hi "$dir"/import-a0-r*)
  shopt -u nullglob
  if [ "$rc" != 0 ] || [ "$crash" = - ] || [ "$ns" != "$world" ] || [ "$ni" != "$world" ]; then
    echo "$label $tool: exit $rc, crash time ${crash}, $ns of $world workers started on attempt 1, $ni imported torch; the run's output:" >&2
    tail -40 "$dir/log" >&2
    exit 1
  fi
  if [ "$tool" = torchrun ] || [ "$tool" = torchrun_ssh ]; then
    seen=$(line_at "$dir" 'failed [(]exitcode') gone=- up=-
  else
    seen=$(line_at "$dir" 'stopping every node') gone=$(line_at "$dir" 'restarting the whole group')
    up=$(line_at "$dir" 'Setting OMP_NUM_THREADS' 'restarting the whole group') # a fresh torchrun's
  fi
  row="$label $tool start_all_ms=$(ms "$crash" "$sa") start_first_ms=$(ms "$crash" "$sf")"
  row+=" import_all_ms=$(ms "$crash" "$ima") import_first_ms=$(ms "$crash" "$imf")"
  row+=" seen_ms=$(ms "$crash" "$seen") gone_ms=$(ms "$crash" "$gone") torchrun_up_ms=$(ms "$crash" "$up") launch_import_all_ms=$(ms "$t0" "$l0all") total_ms=$(ms "$t0" "$t1") ranks=$world"
  echo "$row"
  if [ "$tool" != torchrun ] && [ "$tool" != torchrun_ssh ]; then # where gorun's time went, as its restart line says
    local phases
    phases=$(grep -m1 'gorun: restart after attempt 1:' "$dir/log" | cut -d' ' -f2- || true)
    [ -z "$phases" ] || echo "   $label $tool ${phases#gorun: }"
  fi
  [ "$label" = warmup ] || echo "$row" >>"$work/rows"
}

rev=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . 2>/dev/null || rev+=" (uncommitted changes)"
echo "== restart.sh $mode: $(date -u +%FT%TZ) $rev, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   ROUNDS=$rounds NPROC=$nproc PREFLIGHT=$preflight RUN_TIMEOUT=$limit${cluster:+ NODES=$nodes STATE=$STATE PREFIX=$PREFIX}"
echo "   torchrun: $torchrun; python: $python, torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "   gorun: $gorun ($("$gorun" version 2>&1 | head -1))"
[ -z "${BEFORE:-}" ] || echo "   before: $BEFORE ($("$BEFORE" version 2>&1 | head -1))${BEFORE_ARGS:+ with $BEFORE_ARGS}"
case $mode in
local | device) echo "   gorun: gorun --torchrun TORCHRUN --preflight $preflight, local mode; both: ${job[*]}" ;;
ssh) echo "   gorun: --hosts $hosts over ssh (netns cluster; brought up by this run: $([ $brought = 1 ] && echo yes || echo no)); torchrun: local${TORCHRUN_SSH:+; torchrun_ssh: torchrun on each of the $nodes nodes over ssh, c10d rendezvous at node0}" ;;
slurm) echo "   gorun: inside salloc -N $nodes --ntasks-per-node=$nproc, agents as srun steps (cluster brought up by this run: $([ $brought = 1 ] && echo yes || echo no)); torchrun: local" ;;
esac
[ "$mode" != device ] || echo "   results: keep this output under docs/device/h200-1gpu/restart/ (e.g. | tee \$OUT/restart.txt)"
echo "   ms from the earliest crash; start_all = every worker of the next attempt started (the headline)"

tools=(torchrun gorun)
[ -z "${PREWARM:-}" ] || tools+=(prewarm)
[ -z "${BEFORE:-}" ] || tools+=(before)
[ "$mode" != ssh ] || [ -z "${TORCHRUN_SSH:-}" ] || tools+=(torchrun_ssh)
for tool in "${tools[@]}"; do measure warmup "$tool" >/dev/null; done
# not in a pipeline: the trap must see the running child
for r in $(seq "$rounds"); do
  for tool in "${tools[@]}"; do measure "round=$r" "$tool"; done
done

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v t="$1" -v k="$2" '$2 == t { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k && kv[2] != "-") print kv[2] } }' "$work/rows"; }
echo "== summary over $rounds rounds (ms; ratio = gorun median / torchrun median${PREWARM:+, prewarm_ratio = prewarm median / torchrun median}${BEFORE:+, before_ratio = before median / torchrun median})"
for k in start_all_ms start_first_ms import_all_ms import_first_ms seen_ms gone_ms torchrun_up_ms launch_import_all_ms total_ms; do
  line="$k"
  for tool in "${tools[@]}"; do
    if [ -z "$(col $tool $k)" ]; then line+=" $tool=-"; continue; fi
    line+=" ${tool}_median=$(col $tool $k | median) ${tool}_min=$(col $tool $k | sort -n | head -1) ${tool}_max=$(col $tool $k | sort -n | tail -1)"
  done
  if [ -n "$(col torchrun $k)" ] && [ -n "$(col gorun $k)" ]; then
    t=$(col torchrun $k | median) g=$(col gorun $k | median) line+=" ratio=$(awk -v a="$g" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"; fi
  for other in prewarm before; do
    if [ -n "$(col torchrun $k)" ] && [ -n "$(col $other $k)" ]; then
      t=$(col torchrun $k | median) g=$(col $other $k | median) line+=" ${other}_ratio=$(awk -v a="$g" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"; fi
  done
  for other in gorun prewarm before; do
    if [ -n "$(col torchrun_ssh $k)" ] && [ -n "$(col $other $k)" ]; then
      t=$(col torchrun_ssh $k | median) g=$(col $other $k | median) line+=" ${other}_ssh_ratio=$(awk -v a="$g" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"; fi
  done
  echo "$line"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
