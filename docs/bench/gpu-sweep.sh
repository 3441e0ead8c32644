#!/usr/bin/env bash
# The sweep of a node that answers again, on a real GPU: `gorun _gpufree`
# with "sweep": true kills every process of the run (GORUN_RUN_ID=sweeptest
# in its environment), on the GPU or not, and leaves the others.
#   usage (on the GPU machine, gorun built as .dev/gorun, OUT a folder for the logs): bash docs/bench/gpu-sweep.sh
# Run on the 1-GPU kind on 2026-12-05: docs/device/h200-1gpu/restart/gpu-sweep.txt (the swept
# worker, its environment gone as it died, was then listed as not the job's: fixed since).
set -u
py=$(command -v python3)
hold='import sys, time, torch; x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); print(sys.argv[1], "holds 1 GiB", flush=True); time.sleep(600)'
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
env GORUN_RUN_ID=sweeptest "$py" -c "$hold" job-gpu-worker >"$OUT/job.log" 2>&1 &
job=$!
env GORUN_RUN_ID=sweeptest sleep 600 &
jobsleep=$!
env GORUN_RUN_ID=another-run "$py" -c "$hold" other-run-worker >"$OUT/other.log" 2>&1 &
other=$!
for _ in $(seq 120); do
  grep -q holds "$OUT/job.log" 2>/dev/null && grep -q holds "$OUT/other.log" 2>/dev/null && break
  sleep 0.5
done
cat "$OUT/job.log" "$OUT/other.log"
echo "== pids: job's GPU worker $job, job's sleep $jobsleep, another run's GPU worker $other"
echo "== nvidia-smi before"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
echo "== gorun _gpufree with sweep"
time .dev/gorun _gpufree '{"var":"GORUN_RUN_ID","value":"sweeptest","sweep":true,"timeout_s":10}'
echo "rc=$?"
sleep 1
echo "== still running of the three"
for p in $job $jobsleep $other; do if kill -0 "$p" 2>/dev/null; then echo "$p alive"; else echo "$p gone"; fi; done
echo "== nvidia-smi after"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
kill "$other" 2>/dev/null; wait 2>/dev/null
echo "== end"
