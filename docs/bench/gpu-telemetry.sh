#!/usr/bin/env bash
# GPU telemetry on a GPU node (issue 11). Writes its results under DIR
# (default $OUT).
#   usage: GORUN=path docs/bench/gpu-telemetry.sh PART [ROUNDS] [DIR]
#   PART: overhead   ROUNDS pairs of examples/gpu/telemetry_load.py on every
#                    GPU, alternating telemetry off (--telemetry-interval 0)
#                    and on (1 s, with --telemetry and --report): steps/s of
#                    each run and the ratio of medians (on/off); then one run
#                    at --telemetry-interval 100ms, one under script(1) so the
#                    status line is recorded as a terminal shows it, with
#                    nvidia-smi dmon beside it, and the JSONL loaded by pandas
#         straggler  needs 2 GPUs or more: rank 1 sleeps SLOW_MS (default
#                    150) ms on the host before every step, a starved input
#                    pipeline; its GPU idles while the others wait in the
#                    all_reduce, and gorun should name it live
# Leaves NCCL_NVLS_ENABLE and the machine's other multicast-off variables
# as they are (set, to 0 / 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
part=$1 rounds=${2:-3} dir=${3:-${OUT:-.}}
gorun=${GORUN:?set GORUN to the gorun binary}
torchrun=$(command -v torchrun)
ngpu=$(nvidia-smi -L | wc -l)
duration=${DURATION:-20}
mkdir -p "$dir"
{ echo "date: $(date -u +%FT%TZ)"; nvidia-smi -L; "$gorun" version
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort; } >"$dir/$part-machine.txt" 2>&1

run() { # NAME GORUN-OPTIONS...: one run, its steps/s on stdout
  local name=$1; shift
  DURATION=$duration "$gorun" --torchrun "$torchrun" "$@" --nproc_per_node "$ngpu" \
    examples/gpu/telemetry_load.py >"$dir/$name.log" 2>&1
  echo "exit $?" >>"$dir/$name.log"
  grep -o 'steps_per_s=[0-9.]*' "$dir/$name.log" | cut -d= -f2
}

case $part in
overhead)
  for i in $(seq "$rounds"); do
    off=$(run "off-$i" --telemetry-interval 0)
    on=$(run "on-$i" --telemetry "$dir/on-$i.jsonl" --report "$dir/on-$i.html")
    echo "round $i: telemetry off $off steps/s, on (1 s) $on steps/s"
  done | tee "$dir/overhead.txt"
  python3 - "$dir/overhead.txt" <<'PY' | tee -a "$dir/overhead.txt"
import re, statistics, sys
rows = [re.findall(r"([0-9.]+) steps/s", l) for l in open(sys.argv[1])]
off = [float(r[0]) for r in rows if len(r) == 2]
on = [float(r[1]) for r in rows if len(r) == 2]
print(f"median off {statistics.median(off):.3f}, on {statistics.median(on):.3f} steps/s; "
      f"ratio on/off {statistics.median(on) / statistics.median(off):.4f}")
PY
  fast=$(run fast --telemetry-interval 100ms --telemetry "$dir/fast.jsonl")
  echo "100 ms sampling: $fast steps/s" | tee -a "$dir/overhead.txt"
  nvidia-smi dmon -s putc -c $((duration + 8)) >"$dir/dmon.txt" 2>&1 &
  dmon=$!
  if command -v script >/dev/null; then
    DURATION=$duration script -qfec "$gorun --torchrun $torchrun --telemetry $dir/tty.jsonl --report $dir/report.html --nproc_per_node $ngpu examples/gpu/telemetry_load.py" "$dir/tty.txt" >/dev/null
  else
    run tty --telemetry "$dir/tty.jsonl" --report "$dir/report.html" >/dev/null
  fi
  wait $dmon
  python3 - "$dir/tty.jsonl" <<'PY' | tee "$dir/pandas.txt"
import sys, pandas as pd
df = pd.read_json(sys.argv[1], lines=True)
df["time"] = pd.to_datetime(df["time"])
print(df.shape, list(df.columns))
cols = ["sm_pct", "power_w", "sm_clock_mhz", "temp_c", "pcie_rx_mbps", "pcie_tx_mbps", "nvlink_rx_mbps", "nvlink_tx_mbps", "mem_used_mib"]
print(df.groupby(["node", "gpu"])[cols].describe().T.to_string())
print("clock reasons seen:", sorted({r for rs in df["clock_reasons"] for r in rs}))
print("events:", sorted({e for es in df["events"] for e in es}))
PY
  ;;
straggler)
  [ "$ngpu" -ge 2 ] || { echo "straggler needs 2 GPUs or more; this node has $ngpu" | tee "$dir/straggler.txt"; exit 1; }
  SLOW_RANK=1 SLOW_MS=${SLOW_MS:-150} DURATION=$((duration + 20)) "$gorun" --torchrun "$torchrun" \
    --telemetry "$dir/straggler.jsonl" --report "$dir/straggler.html" --nproc_per_node "$ngpu" \
    examples/gpu/telemetry_load.py >"$dir/straggler.txt" 2>&1
  echo "exit $?" >>"$dir/straggler.txt"
  grep '^gorun: .*gpu' "$dir/straggler.txt" | tee "$dir/straggler-findings.txt"
  ;;
esac
