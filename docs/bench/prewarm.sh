#!/usr/bin/env bash
# Pre-warmed workers (--prewarm): torchrun, gorun (its default: no pool) and gorun --prewarm
# PREWARM (default torch; the "prewarm" rows)
# alternating in one run, ROUNDS (5) rounds each, on the restart job of docs/bench/restart.sh,
# whose options and modes (local|ssh|slurm|device) this takes. The figures for the pool:
#   launch_import_all_ms   launch → every rank of the first attempt past `import torch`
#   import_all_ms          crash on attempt 0 → every rank of attempt 1 past `import torch`
# (a pooled worker's script starts with torch imported, so its start_all equals import_all).
#
#   usage: [PREWARM=torch] [ROUNDS=5] [NPROC=2] ... docs/bench/prewarm.sh local|ssh|slurm|device
set -euo pipefail
export PREWARM=${PREWARM:-torch}
exec bash "$(dirname "$0")/restart.sh" "$@"
