#!/usr/bin/env bash
# A typical job script, as written for torchrun: run on EVERY node, each
# with its own --node-rank, and a master address agreed on beforehand.
#SBATCH --nodes=2 --gpus-per-node=8
torchrun --nnodes=2 --nproc-per-node=8 --node-rank="$SLURM_NODEID" \
  --master-addr="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)" --master-port=29500 \
  train.py --lr 3e-4
