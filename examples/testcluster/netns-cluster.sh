#!/usr/bin/env bash
# netns-cluster.sh - simulate an N-node cluster on one Linux host for CI.
#
#   netns-cluster.sh up N     # (re)create N nodes: netns + veth on a bridge + real sshd
#   netns-cluster.sh down     # kill everything in the namespaces, delete all state
#   netns-cluster.sh status
#
# Node i: netns ${PREFIX}-node$i, eth0 = ${SUBNET}.$((10+i))/24, hostname node$i. Past 245
# nodes (up to 1,000: a Linux bridge takes 1,024 ports) the net is the /16 around SUBNET and
# the addresses run on: node i = the (10+i)th address after ${SUBNET}.0 (node246 =
# ${SUBNET%.*}.1.0); the hosts file says which. That /16 must then be free on this machine.
# (own UTS + PID + mount namespace, so `hostname`, `ps`, `kill` are per node),
# sshd on port 22 with its own host key, root login with the generated key only.
# The filesystem is shared: every node sees the same files (except /etc/hosts
# and /etc/hostname, bind-mounted per node by `ip netns exec` from /etc/netns/NS/).
#
# From the root namespace:   ssh -F $STATE/ssh_config node1 hostname
#                       or:   ssh -i $STATE/id_ed25519 -o UserKnownHostsFile=$STATE/known_hosts root@10.77.0.11 hostname
# State dir layout (what tests read through GORUN_TESTCLUSTER=$STATE):
#   ssh_config    Host node* entries (User, IdentityFile, UserKnownHostsFile, HostName)
#   id_ed25519    the client key every node accepts (root login, key only)
#   known_hosts   every node's host key, as "nodeI,10.77.0.(10+I) ssh-ed25519 ..."
#   hosts         "10.77.0.(10+I) nodeI" lines, one per node (past 245 nodes, node_ip's)
#   nodeI/        host key, sshd_config, sshd.log of node I
# NODE_BASHRC=FILE: every node's sessions source FILE instead of the user's ~/.bashrc (bash
# sources it for a command over ssh), bind-mounted in the node's own mount namespace: for
# benchmarks of a launcher, apart from what the machine's rc files cost each session.
# NODE_SSHD=0 (default 1): no SSH at all. Each node's pid 1 is then a placeholder init (a
# bash that reaps orphans and exits on SIGTERM) instead of sshd, and the state dir holds only
# hosts and nodeI/ (no keys, no ssh_config, no known_hosts): for clusters reached some other
# way (slurm-cluster.sh enters the nodes' namespaces through that init).
# Needs: root, iproute2, util-linux (unshare), openssh-server, openssh-client (the ssh
# packages not with NODE_SSHD=0). Installs nothing: the caller (CI) installs the packages.
set -euo pipefail

PREFIX=${PREFIX:-gorun}
SUBNET=${SUBNET:-10.77.0}                 # /24 (/16 past 245 nodes); bridge gets .1, node i the (10+i)th
STATE=${STATE:-${TMPDIR:-/tmp}/gorun-testcluster}         # keys, configs, logs
BR=${PREFIX}-br0
SSHD=${SSHD:-/usr/sbin/sshd}
NODE_SSHD=${NODE_SSHD:-1}
NODE_BASHRC=${NODE_BASHRC:-}              # a file bind-mounted over ~/.bashrc in every node

MARK=.gorun-testcluster                   # only a dir holding this file is ever deleted

log() { echo "netns-cluster: $*" >&2; }

# node_ip I: node I's address, the (10+I)th after $SUBNET.0, carried into the third octet
node_ip() {
  local v=$((10 + $1)) c=${SUBNET##*.}
  echo "${SUBNET%.*}.$((c + v / 256)).$((v % 256))"
}

need() {
  local c missing="" cmds=(ip unshare)
  if [ "$NODE_SSHD" = 0 ]; then cmds+=(nsenter); else cmds+=(ssh ssh-keygen "$SSHD"); fi
  for c in "${cmds[@]}"; do
    command -v "$c" >/dev/null 2>&1 || missing+=" $c"
  done
  [ -z "$missing" ] || { log "missing:$missing (apt-get install openssh-server openssh-client iproute2)"; exit 1; }
}

# the hostname seen by the pid 1 of netns $1's PID namespace (empty: none yet)
init_hostname() {
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    if grep -qP '^NSpid:\t[0-9]+\t1$' "/proc/$p/status" 2>/dev/null; then
      nsenter -t "$p" -u hostname 2>/dev/null; return
    fi
  done
}

nodes() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-node[0-9]+$" || true; }

down() {
  local ns pids
  for ns in $(nodes); do
    # every process whose network namespace is ours (sshd, sessions, torchrun, ...)
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill -TERM $pids 2>/dev/null || true; fi
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=""; for ns in $(nodes); do pids+=" $(ip netns pids "$ns" 2>/dev/null || true)"; done
    [ -z "${pids// /}" ] && break
    sleep 0.2
  done
  if [ -n "${pids// /}" ]; then kill -KILL $pids 2>/dev/null || true; sleep 0.2; fi
  for ns in $(nodes); do ip netns del "$ns" 2>/dev/null || true; done   # also removes the veths
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  if command -v iptables >/dev/null 2>&1; then
    while iptables -D FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null; do :; done
  fi
  rm -rf /etc/netns/"${PREFIX}"-node*
  # never rm -rf a directory this script did not create (STATE=/ would be a disaster)
  if [ -e "$STATE/$MARK" ]; then rm -rf "$STATE"; fi
}

up() {
  local n=${1:?usage: $0 up N} i ns ip hk
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 1000 ] || { log "bad N: $n (1 to 1000)"; exit 2; }
  local bits=24
  if [ "$n" -gt 245 ]; then
    bits=16
    [ $((${SUBNET##*.} + (10 + n) / 256)) -le 255 ] || { log "SUBNET=$SUBNET leaves no room for $n nodes in its /16"; exit 2; }
    # the root namespace's neighbour table holds an entry per node it talks to
    local t
    for t in 1 2 3; do
      [ "$(cat /proc/sys/net/ipv4/neigh/default/gc_thresh$t)" -ge $((4 * n)) ] || echo $((4 * n)) >/proc/sys/net/ipv4/neigh/default/gc_thresh$t
    done
  fi
  case $NODE_SSHD in 0 | 1) ;; *) log "NODE_SSHD must be 0 or 1, not $NODE_SSHD"; exit 2 ;; esac
  need
  down                                    # idempotent: always start from a clean slate
  if [ -e "$STATE" ] && [ -n "$(ls -A "$STATE" 2>/dev/null)" ]; then
    log "STATE=$STATE exists and is not a cluster state dir; refusing to use it"; exit 1
  fi
  mkdir -p "$STATE"; chmod 700 "$STATE"; : >"$STATE/$MARK"
  local rc=""
  if [ -n "$NODE_BASHRC" ]; then
    [ -f "$NODE_BASHRC" ] && [ -f ~/.bashrc ] || { log "NODE_BASHRC=$NODE_BASHRC: it and ~/.bashrc must both be files"; exit 2; }
    rc="mount --bind $(printf %q "$(realpath "$NODE_BASHRC")") $(printf %q ~/.bashrc) &&"
  fi
  if [ "$NODE_SSHD" = 1 ]; then
    ssh-keygen -q -t ed25519 -N '' -C "${PREFIX}-ci" -f "$STATE/id_ed25519"
    cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"; chmod 600 "$STATE/authorized_keys"
    mkdir -p /run/sshd; chmod 755 /run/sshd  # sshd privilege-separation dir
  fi

  ip link add "$BR" type bridge
  ip addr add "$SUBNET.1/$bits" dev "$BR"
  ip link set "$BR" up
  # Docker hosts (e.g. GitHub runners) have br_netfilter + FORWARD policy DROP: allow our bridge.
  if command -v iptables >/dev/null 2>&1; then
    iptables -I FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null || true
  fi

  : >"$STATE/hosts"
  for ((i = 0; i < n; i++)); do echo "$(node_ip "$i") node$i" >>"$STATE/hosts"; done
  if [ "$NODE_SSHD" = 1 ]; then
    : >"$STATE/known_hosts"
    {
      echo "Host node*"
      echo "  User root"
      echo "  IdentityFile $STATE/id_ed25519"
      echo "  IdentitiesOnly yes"
      echo "  UserKnownHostsFile $STATE/known_hosts"
      echo "  StrictHostKeyChecking yes"
      echo "  BatchMode yes"
      echo "  ConnectTimeout 5"
      echo "  LogLevel ERROR"
    } >"$STATE/ssh_config"
  fi

  for ((i = 0; i < n; i++)); do
    ns=${PREFIX}-node$i; ip=$(node_ip "$i"); hk=$STATE/node$i
    mkdir -p "$hk"
    ip netns add "$ns"
    ip link add "${PREFIX}-v$i" type veth peer name eth0 netns "$ns"
    ip link set "${PREFIX}-v$i" master "$BR" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$ip/$bits" dev eth0
    ip -n "$ns" link set eth0 up

    # per-node /etc/hosts + /etc/hostname (bind-mounted by `ip netns exec`)
    mkdir -p /etc/netns/"$ns"
    { echo "127.0.0.1 localhost"; cat "$STATE/hosts"; } >/etc/netns/"$ns"/hosts
    echo "node$i" >/etc/netns/"$ns"/hostname

    if [ "$NODE_SSHD" = 0 ]; then
      # pid 1 must reap what is orphaned in the node and end on SIGTERM (a pid 1 ignores
      # signals it has no handler for): bash blocked in a read that never returns.
      setsid ip netns exec "$ns" unshare --uts --pid --fork --kill-child --mount-proc \
        bash -c "hostname node$i && trap 'exit 0' TERM INT && exec 3<> <(:) && while :; do read -r -u 3 _ || sleep 1; done" \
        </dev/null >>"$hk/init.log" 2>&1 &
      continue
    fi
    ssh-keygen -q -t ed25519 -N '' -C "node$i" -f "$hk/ssh_host_ed25519_key"
    echo "node$i,$ip $(cut -d' ' -f1,2 "$hk/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
    printf '%s\n' "Host node$i" "  HostName $ip" >>"$STATE/ssh_config"
    cat >"$hk/sshd_config" <<EOF
Port 22
ListenAddress 0.0.0.0
HostKey $hk/ssh_host_ed25519_key
PidFile $hk/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $STATE/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
AcceptEnv LANG LC_* GORUN_* TORCH* NCCL_* GLOO_*
# A session whose head vanished (a cut link: its FIN never came) is reaped
# after 3 unanswered keepalives 2 s apart, as sites set it; without, its
# sshd process stays on the node for good, which the e2e tests count as a
# leftover.
ClientAliveInterval 2
ClientAliveCountMax 3
Subsystem sftp internal-sftp
LogLevel INFO
EOF
    "$SSHD" -t -f "$hk/sshd_config"
    # own UTS (hostname), PID (ps/kill only see this node) and mount (/proc) namespaces
    setsid ip netns exec "$ns" unshare --uts --pid --fork --kill-child --mount-proc \
      sh -c "hostname node$i && $rc exec $SSHD -D -e -f $hk/sshd_config" \
      </dev/null >>"$hk/sshd.log" 2>&1 &
  done

  if [ "$NODE_SSHD" = 0 ]; then
    # wait until every node's init has set its hostname
    for ((i = 0; i < n; i++)); do
      for t in $(seq 1 100); do
        if [ "$(init_hostname "${PREFIX}-node$i")" = "node$i" ]; then break; fi
        [ "$t" = 100 ] && { log "node$i's init did not start; see $STATE/node$i/init.log"; exit 1; }
        sleep 0.05
      done
    done
    log "up: $n nodes, no sshd (NODE_SSHD=0)"
    return
  fi
  # wait until every sshd answers
  for ((i = 0; i < n; i++)); do
    for t in $(seq 1 100); do
      if ssh -F "$STATE/ssh_config" "node$i" true 2>/dev/null; then break; fi
      [ "$t" = 100 ] && { log "node$i sshd not answering; see $STATE/node$i/sshd.log"; exit 1; }
      sleep 0.05
    done
  done
  log "up: $n nodes; try: ssh -F $STATE/ssh_config node0 hostname"
}

status() {
  local ns
  for ns in $(nodes); do
    echo "$ns: $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}') pids: $(ip netns pids "$ns" | tr '\n' ' ')"
  done
}

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
case "${1:-}" in
  up) shift; up "$@" ;;
  down) down; log "down" ;;
  status) status ;;
  *) echo "usage: $0 up N | down | status" >&2; exit 2 ;;
esac
