#!/usr/bin/env bash
# gorun preflight --bandwidth on a GPU node, with an independent plain-torch
# measurement in the same run, and the injected faults. Results under DIR.
#   usage: GORUN=path docs/bench/gpu-bandwidth.sh PART [DIR]
#   PART: 1gpu  host<->device and a 1-GPU all_reduce, compared with
#               bw_independent.py; stalled-step and corrupted-copy hooks;
#               --preflight-bandwidth node before a launch (dry run, and a
#               launch a corrupted copy stops)
#         2gpu  the same plus every GPU pair (P2P compared too), busbw at
#               2 GiB, NCCL_P2P_DISABLE=1 exported (all_reduce falls, the
#               report says why) and a corrupted P2P copy
# NCCL_NVLS_ENABLE and the other multicast-off variables the machine sets
# are left as they are.
set -uo pipefail
cd "$(dirname "$0")/../.."
part=$1 dir=${2:-${OUT:-.}}
gorun=${GORUN:?set GORUN to the gorun binary}
mkdir -p "$dir"
run() { # name, then env assignments and the command; keeps output, time and exit code
  local name=$1; shift
  local t0=$(date +%s%N)
  { echo "\$ $*"; env "$@"; echo "exit $?"; } >"$dir/$name.txt" 2>&1
  echo "$name: $(( ($(date +%s%N) - t0) / 1000000 )) ms, $(tail -1 "$dir/$name.txt")" | tee -a "$dir/times.txt"
}
{ echo "date: $(date -u +%FT%TZ)"; nvidia-smi -L; nvidia-smi topo -m; "$gorun" version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort; } >"$dir/machine.txt" 2>&1

run node-text "$gorun" preflight --bandwidth node
"$gorun" preflight --bandwidth node --json >"$dir/node.json" 2>"$dir/node-json.stderr"
{ python3 docs/bench/bw_independent.py host
  python3 docs/bench/bw_independent.py allreduce
  [ "$part" = 2gpu ] && python3 docs/bench/bw_independent.py p2p; } >"$dir/independent.jsonl" 2>"$dir/independent.stderr"
python3 docs/bench/bw_compare.py "$dir/node.json" "$dir/independent.jsonl" | tee "$dir/compare.txt"
run stall-host GORUN_BW_TEST_STALL="host 0" "$gorun" preflight --bandwidth node
run stall-allreduce GORUN_BW_TEST_STALL="allreduce 1073741824" "$gorun" preflight --bandwidth node
run corrupt-host GORUN_BW_TEST_CORRUPT=host "$gorun" preflight --bandwidth node
run corrupt-allreduce GORUN_BW_TEST_CORRUPT=allreduce "$gorun" preflight --bandwidth node
# the same check before a launch: a dry run, then a launch stopped by a fault
run launch-dry "$gorun" --preflight-bandwidth node --dry-run --nproc-per-node gpu docs/bench/bw_independent.py host
run launch-corrupt GORUN_BW_TEST_CORRUPT=host "$gorun" --preflight-bandwidth node --nproc-per-node gpu docs/bench/bw_independent.py host
if [ "$part" = 2gpu ]; then
  run p2p-disabled NCCL_P2P_DISABLE=1 "$gorun" preflight --bandwidth node
  NCCL_P2P_DISABLE=1 "$gorun" preflight --bandwidth node --json >"$dir/p2p-disabled.json" 2>/dev/null
  python3 - "$dir/node.json" "$dir/p2p-disabled.json" <<'PY' | tee "$dir/busbw-2gib.txt"
import json, sys
for name, path in (("default", sys.argv[1]), ("NCCL_P2P_DISABLE=1", sys.argv[2])):
    n = json.load(open(path))["nodes"][0]
    ar = [a for a in n["facts"]["bandwidth"].get("allreduce", []) if a["bytes"] == 2 << 30]
    bus = ar[0]["busbw_gbs"] if ar else 0
    f = [x for x in n["findings"] if x["id"] == "bandwidth.allreduce"]
    print("%-20s busbw at 2 GiB %.1f GB/s%s | %s" % (name, bus, "  (goal >= 330: %s)" % ("met" if bus >= 330 else "NOT met") if name == "default" else "",
          (f[0]["severity"] + " " + f[0]["message"] + " / " + f[0].get("remedy", "")) if f else "no finding"))
PY
  run corrupt-p2p GORUN_BW_TEST_CORRUPT=p2p "$gorun" preflight --bandwidth node
  run plan-after-corrupt GORUN_BW_TEST_CORRUPT=p2p "$gorun" --preflight warn --preflight-bandwidth node --dry-run --nproc-per-node gpu docs/bench/bw_independent.py
fi
