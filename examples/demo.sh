#!/usr/bin/env bash
# gorun's demo: a real multi-node job on this one machine.
#
# Brings up a 2-node cluster (network namespaces, each with a real OpenSSH
# sshd), then, from this "head", runs a DDP job on both nodes through gorun:
# the plan, the preflight, every node's output prefixed, a worker crashing
# at start-up on the first attempt, the whole group stopped and restarted,
# success; then a hang caught with every rank's stack.
# Everything is torn down at the end. Needs root (namespaces) and Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it creates network namespaces)" >&2; exit 2; }

need=()
for p in openssh-server openssh-client iproute2 python3-torch procps; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "demo: installing ${need[*]} (python3-torch is large; a few minutes)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d /tmp/gorun-demo.XXXXXX)
export STATE=$work/cluster PREFIX=gorundemo SUBNET=10.78.0
cluster=examples/testcluster/netns-cluster.sh
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$work"' EXIT

echo "demo: building gorun"
# go-nvml's cgo calls functions nvml.h marks deprecated: gcc's warnings
# about them are noise here (.ci/test quiets them the same way).
CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o "$work/gorun" .
"$cluster" up 2

gorun=("$work/gorun" --ssh-config "$STATE/ssh_config" --hosts node0:2,node1:2
       --torchrun "$PWD/examples/testcluster/torchrun-debian-shim")
script=$PWD/examples/testcluster/train_ddp.py

echo; echo "demo: 1) the plan (gorun --dry-run): what would run where, and why"
"${gorun[@]}" --dry-run "$script"

echo; echo "demo: 2) the job, with global rank 3 (node1) exiting with 7 before init_process_group"
echo "        on the first attempt (a missing data file on one node, say): torchrun alone"
echo "        would leave the other ranks waiting in rendezvous; gorun hears the worker's"
echo "        exit, stops both nodes within a second and restarts the whole group"
"${gorun[@]}" --max-restarts 1 --env CRASH_RANK=3 --env CRASH_ON_ATTEMPT=0 --env CRASH_STEP=init \
  --env CRASH_CODE=7 --env STEPS=5 "$script"

echo; echo "demo: 3) a hang: rank 1 stops at step 1 and the others wait for it in their next"
echo "        collective; with --hang-timeout 10s gorun names the silent ranks, prints"
echo "        every rank's Python stack and exits 124"
code=0
"${gorun[@]}" --hang-timeout 10s --env HANG_RANK=1 --env STEPS=20 --env STEP_SLEEP=0.2 "$script" || code=$?
echo "demo: gorun exited $code (124: hang)"
[ "$code" = 124 ] || exit 1
echo; echo "demo: done; tearing the cluster down"
