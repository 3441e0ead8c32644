#!/usr/bin/env bash
# slurm-cluster.sh - a real Slurm cluster of N nodes on one Linux host, for CI.
#
#   slurm-cluster.sh up N     # (re)create N nodes (netns-cluster.sh) + munged + slurmctld + N slurmd
#   slurm-cluster.sh down     # kill the Slurm daemons, every job and everything in the namespaces; delete all state
#   slurm-cluster.sh status   # the nodes and their Slurm states
#
# Then, on the head (the root namespace): `up` prints the one line to eval (logs go to stderr)
#   export SLURM_CONF=$STATE/slurm.conf    # or: eval "$(slurm-cluster.sh up 3)"
#   srun -N 3 hostname                     # node0 node1 node2
#   sbatch --wait -N 3 --wrap 'srun hostname'
#
# The nodes are netns-cluster.sh's (it is called with the same PREFIX/SUBNET/STATE):
# node i = netns ${PREFIX}-node$i, eth0 = ${SUBNET}.$((10+i)), hostname node$i, its own UTS +
# PID + mount namespaces, shared filesystem. No SSH server runs in the nodes: they are made
# with NODE_SSHD=0, so pid 1 of each node is netns-cluster.sh's placeholder init (a bash that
# reaps orphans), and Slurm is the only way in. NODE_SSHD=1 keeps a real sshd as pid 1
# instead (ssh -F $STATE/ssh_config nodeI then works too: for comparing srun with ssh on the
# very same nodes, as docs/bench/slurm-vs-ssh.sh does). On top of them:
#   munged     one, on the head. Its socket is a path under $STATE, and the filesystem is
#              shared, so every node (slurmd, slurmstepd, srun inside a job) reaches it:
#              slurm.conf's AuthInfo=socket=... points everyone at it. One key, one daemon.
#   slurmctld  on the head (root namespace), SlurmctldHost=$(hostname -s)($SUBNET.1): the
#              nodes reach it over the bridge, the head's clients on the same address.
#   slurmd     one per node, run with nsenter inside the node's net + UTS + mount + PID
#              namespaces (those of the node's pid 1), as -N node$i, NodeAddr as in $STATE/hosts ($SUBNET.$((10+i)) up to 245 nodes).
#              Jobs (slurmstepd and the tasks) therefore run inside the node: hostname is
#              node$i, `ip netns pids ${PREFIX}-node$i` lists them, `down` kills them.
#              An idle node holds exactly: unshare (outside the node's PID namespace, holding
#              it), the init (pid 1 there; bash, or sshd with NODE_SSHD=1), nsenter and slurmd.
#   Config: SlurmUser=root, select/cons_tres + CR_Core, CPUs=$CPUS per node (default 4,
#   oversubscribing the host: SlurmdParameters=config_overrides), proctrack/linuxproc,
#   task/none, no accounting: a finished job is only in `scontrol show job` for
#   MinJobAge=$MIN_JOB_AGE s after its end (then purged: there is no sacct). The default 4
#   keeps `sbatch --wait` polling every 2 s: it sleeps 2 s, then x4 while the sleep is under
#   MinJobAge/2 (up to 32 s), so with Slurm's default 300 a 20 s job is seen ending at 42 s.
#   22.05 refuses a MinJobAge under 2 (0, "never purge", becomes 2). One partition "debug"
#   (default) with every node.
#
# Variables: PREFIX (default gorun-slurm), SUBNET (10.80.0; the demo uses 10.78.0), STATE (/tmp/gorun-slurm-cluster),
# CPUS (4), SLURMCTLD_PORT (6817; the slurmd port 6818 is per node namespace, no clash),
# UP_TIMEOUT (60 s to wait for every node to be idle), NODE_SSHD (0), MIN_JOB_AGE (4). The
# defaults differ from netns-cluster.sh's, so both clusters can exist at once; do not give
# this script the PREFIX or STATE of a netns-cluster.sh cluster: `up` starts by bringing that
# one down.
# Interface names are ${PREFIX}-br0 and ${PREFIX}-v$i: at most 15 characters (N <= 100 for
# the default PREFIX).
#
# State dir layout (netns-cluster.sh's files, plus):
#   slurm.conf            the cluster's config: SLURM_CONF=$STATE/slurm.conf for every client
#   plugstack.conf        empty (keeps /etc/slurm/plugstack.conf out)
#   cgroup.conf           CgroupPlugin=cgroup/v1 (never used: nothing cgroup is configured)
#   munge/                munge.key, munge.socket.2, munged.pid, munged.log, munged.seed
#   slurmctld/            StateSaveLocation, slurmctld.log, slurmctld.pid, slurmctld.out
#   slurmd/nodeI/         SlurmdSpoolDir of node I (slurmd.pid there too)
#   slurmd/nodeI.log      slurmd's log of node I (.out: its stdout/stderr)
# STATE is chmod 711 (munged wants every directory above its socket searchable by all);
# the secrets inside stay 600. `down` deletes STATE only if it holds netns-cluster.sh's
# marker file; it finds slurmctld/munged/slurmd by "$STATE/" on their command line.
# Notes for jobs: the head is not a compute node; tasks get the submitter's environment
# (PATH included: a pyenv python3 on the head's PATH is what the nodes run) and start in
# the submitter's cwd (shared filesystem; not under $STATE, which down deletes); nodes
# resolve node0..node{N-1} (netns-cluster.sh's per-node /etc/hosts), the head does not.
# "mpi/pmix ... can not load PMIx library" in the logs is harmless (libpmix not installed).
# Needs: root, netns-cluster.sh's needs (iproute2, util-linux; openssh-server and
# openssh-client only with NODE_SSHD=1) and slurmctld slurmd slurm-client munge. Installs nothing:
#   apt-get install slurmctld slurmd slurm-client munge
set -euo pipefail

PREFIX=${PREFIX:-gorun-slurm}
SUBNET=${SUBNET:-10.80.0}
STATE=${STATE:-${TMPDIR:-/tmp}/gorun-slurm-cluster}
CPUS=${CPUS:-4}
SLURMCTLD_PORT=${SLURMCTLD_PORT:-6817}
UP_TIMEOUT=${UP_TIMEOUT:-60}
NODE_SSHD=${NODE_SSHD:-0}
MIN_JOB_AGE=${MIN_JOB_AGE:-4}
case $STATE in /*) ;; *) STATE=$PWD/$STATE ;; esac   # absolute: daemons and jobs use it from /
STATE=${STATE%/}
[ -n "$STATE" ] || { echo "slurm-cluster: STATE=/ refused" >&2; exit 2; }
export PREFIX SUBNET STATE NODE_SSHD

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS_CLUSTER=$HERE/netns-cluster.sh
CONF=$STATE/slurm.conf
MARK=.gorun-testcluster                   # netns-cluster.sh's marker: only such a dir is deleted
DPATH=/usr/sbin:/usr/bin:/sbin:/bin       # the daemons' PATH (their environment is cleared)

log() { echo "slurm-cluster: $*" >&2; }

need() {
  local c missing=""
  for c in ip nsenter ss munged mungekey munge unmunge slurmctld slurmd slurmstepd \
    srun sbatch sinfo squeue scontrol scancel; do
    command -v "$c" >/dev/null 2>&1 || missing+=" $c"
  done
  [ -z "$missing" ] || {
    log "missing:$missing (apt-get install slurmctld slurmd slurm-client munge iproute2 util-linux)"
    exit 1
  }
  [ -r "$NETNS_CLUSTER" ] || { log "missing $NETNS_CLUSTER"; exit 1; }
}

# pids of the processes started for this STATE in the root namespace (or anywhere): the
# Slurm daemons and munged name $STATE/ on their command line.
state_pids() {
  local p cmd comm
  for p in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$p/comm" || continue   # no fork per process: this loop sees them all
    case $comm in slurmctld | slurmd | munged) ;; *) continue ;; esac
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case " $cmd" in *" $STATE/"* | *"=$STATE/"*) echo "${p#/proc/}" ;; esac
  done
}

# slurmctld + munged on the head (and any slurmd left): found by command line, not by pid
# file, so a stale or foreign pid file never gets a process killed
stop_daemons() {
  local pids f p
  pids=$(state_pids | tr '\n' ' ')
  [ -n "${pids// /}" ] || return 0
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    p=""; for f in $pids; do kill -0 "$f" 2>/dev/null && p+=" $f"; done
    [ -z "$p" ] && return 0
    sleep 0.1
  done
  kill -KILL $p 2>/dev/null || true
}

down() {
  stop_daemons
  bash "$NETNS_CLUSTER" down              # slurmd, slurmstepd, jobs, the inits; netns, bridge, $STATE
}

# pid (in the root PID namespace) of node $1's pid 1: the process whose namespaces slurmd joins
node_init() {
  local ns=${PREFIX}-node$1 p
  for p in $(ip netns pids "$ns" 2>/dev/null); do
    if grep -qP '^NSpid:\t[0-9]+\t1$' "/proc/$p/status" 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

# munged, and every daemon up() started in the background ($started: the pids of their
# subshells, which exec setsid -w, so each stays for as long as its daemon runs), still running?
# (Not by the daemons' names: for a moment after its start a slurmd is still nsenter or env.)
daemons_alive() {
  local c p comms=""
  for p in $(state_pids); do read -r c 2>/dev/null <"/proc/$p/comm" && comms+="$c "; done
  [[ " $comms" == *" munged "* ]] || { log "munged is not running"; return 1; }
  for p in $started; do
    kill -0 "$p" 2>/dev/null || { log "a daemon (started as pid $p) has ended"; return 1; }
  done
}

show_logs() {
  local f
  for f in "$STATE/munge/munged.log" "$STATE/slurmctld/slurmctld.log" "$STATE/slurmctld/slurmctld.out" \
    "$STATE"/slurmd/node*.log "$STATE"/slurmd/node*.out; do
    [ -s "$f" ] || continue
    echo "---- $f (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
}

secs() { printf '%d.%01d' $(($1 / 1000000000)) $(($1 / 100000000 % 10)); }   # ns -> s.d
since() { secs $(($(date +%s%N) - $1)); }

fail() { log "$*"; show_logs; log "state and logs kept in $STATE; '$0 down' removes them"; exit 1; }

write_conf() {
  local n=$1 i
  cat >"$CONF" <<EOF
# generated by slurm-cluster.sh: a test cluster, SLURM_CONF=$CONF
ClusterName=gorun
SlurmctldHost=$(hostname -s)($SUBNET.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket.2
PlugStackConfig=$STATE/plugstack.conf
StateSaveLocation=$STATE/slurmctld
SlurmctldPidFile=$STATE/slurmctld/slurmctld.pid
SlurmctldLogFile=$STATE/slurmctld/slurmctld.log
SlurmdSpoolDir=$STATE/slurmd/%n
SlurmdPidFile=$STATE/slurmd/%n/slurmd.pid
SlurmdLogFile=$STATE/slurmd/%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=$MIN_JOB_AGE
KillWait=5
InactiveLimit=0
MailProg=/bin/true
SlurmdTimeout=60
EOF
  for ((i = 0; i < n; i++)); do
    echo "NodeName=node$i NodeAddr=$(awk -v n="node$i" '$2 == n {print $1}' "$STATE/hosts") NodeHostname=node$i CPUs=$CPUS State=UNKNOWN" >>"$CONF"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

up() {
  local n=${1:?usage: $0 up N} i init t0 t1 states
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 1000 ] || { log "bad N: $n (1 to 1000)"; exit 2; }
  [[ $CPUS =~ ^[0-9]+$ ]] && [ "$CPUS" -ge 1 ] || { log "bad CPUS: $CPUS"; exit 2; }
  [[ $MIN_JOB_AGE =~ ^[0-9]+$ ]] && [ "$MIN_JOB_AGE" -ge 2 ] || { log "bad MIN_JOB_AGE: $MIN_JOB_AGE (at least 2)"; exit 2; }
  local ifn
  for ifn in "${PREFIX}-br0" "${PREFIX}-v$((n - 1))"; do
    [ ${#ifn} -le 15 ] || { log "interface name $ifn is over 15 characters: shorten PREFIX or N"; exit 2; }
  done
  need
  t0=$(date +%s%N)
  stop_daemons                            # netns-cluster.sh up below brings the rest down
  if ss -Hltn "sport = :$SLURMCTLD_PORT" | grep -q .; then
    log "port $SLURMCTLD_PORT is taken on the head (another slurmctld?): set SLURMCTLD_PORT"; exit 1
  fi
  bash "$NETNS_CLUSTER" up "$n"           # namespaces, bridge, an init per node, $STATE (+ marker)
  [ -e "$STATE/$MARK" ] || { log "netns-cluster.sh made no $STATE/$MARK"; exit 1; }
  t1=$(date +%s%N)
  chmod 711 "$STATE"
  mkdir -p "$STATE/munge" "$STATE/slurmctld" "$STATE/slurmd"
  chmod 755 "$STATE/munge" "$STATE/slurmd"; chmod 700 "$STATE/slurmctld"
  for ((i = 0; i < n; i++)); do mkdir -p "$STATE/slurmd/node$i"; chmod 755 "$STATE/slurmd/node$i"; done
  : >"$STATE/plugstack.conf"
  # slurmd loads a cgroup plugin even with proctrack/linuxproc + task/none; inside a node
  # /sys is the netns's own sysfs with nothing on /sys/fs/cgroup, so autodetect fails
  # ("No filesystem mounted on /sys/fs/cgroup"). cgroup/v1 loads without touching it.
  echo "CgroupPlugin=cgroup/v1" >"$STATE/cgroup.conf"
  write_conf "$n"

  # munge: one daemon on the head; its socket path is visible from every node
  mungekey --create --keyfile="$STATE/munge/munge.key" >/dev/null 2>&1 ||
    { dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none; }
  chmod 400 "$STATE/munge/munge.key"
  env -i PATH=$DPATH munged --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket.2" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed" --num-threads=4 </dev/null ||
    fail "munged did not start"
  munge -n -S "$STATE/munge/munge.socket.2" | unmunge -S "$STATE/munge/munge.socket.2" >/dev/null ||
    fail "munge round trip failed"

  # slurmctld on the head
  # (the subshell execs: nothing of this script stays behind holding the caller's stdout)
  started=""
  (cd "$STATE/slurmctld" && exec setsid -w env -i PATH=$DPATH SLURM_CONF="$CONF" \
    slurmctld -D -i -f "$CONF") </dev/null >>"$STATE/slurmctld/slurmctld.out" 2>&1 &
  started+=" $!"

  # slurmd inside each node: net + UTS + mount + PID namespaces of the node's pid 1
  for ((i = 0; i < n; i++)); do
    init=$(node_init "$i") || fail "node$i: no process is pid 1 of its PID namespace"
    (cd / && exec setsid -w nsenter -t "$init" -n -u -m -p -- env -i PATH=$DPATH SLURM_CONF="$CONF" \
      slurmd -D -f "$CONF" -N "node$i") </dev/null >>"$STATE/slurmd/node$i.out" 2>&1 &
    started+=" $!"
  done

  # wait for every node to be idle
  export SLURM_CONF=$CONF
  local deadline=$(($(date +%s) + UP_TIMEOUT)) states=""
  while :; do
    # ask only once slurmctld listens: a client finding no controller retries for seconds
    if ss -Hltn "sport = :$SLURMCTLD_PORT" | grep -q .; then
      states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
      if [ "$(grep -c ' idle$' <<<"$states")" = "$n" ]; then break; fi
    fi
    [ "$(date +%s)" -lt "$deadline" ] ||
      fail "nodes not all idle after ${UP_TIMEOUT}s: ${states//$'\n'/, }"
    daemons_alive || fail "a daemon died; nodes: ${states//$'\n'/, }"
    sleep 0.2
  done
  log "up: $n nodes idle in $(since "$t0")s (namespaces: $(secs $((t1 - t0)))s, Slurm: $(since "$t1")s); the clients need:"
  echo "export SLURM_CONF=$CONF"
}

status() {
  bash "$NETNS_CLUSTER" status
  [ -r "$CONF" ] || { echo "no $CONF: the Slurm cluster is down"; return 0; }
  SLURM_CONF=$CONF sinfo -N -o '%N %T %C %O %E' || echo "slurmctld not answering ($CONF)"
}

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
case "${1:-}" in
  up) shift; up "$@" ;;
  down) down; log "down" ;;
  status) status ;;
  *) echo "usage: $0 up N | down | status" >&2; exit 2 ;;
esac
