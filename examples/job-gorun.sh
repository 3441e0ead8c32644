#!/usr/bin/env bash
# The same job through gorun: one word changed, run once on the head node.
# gorun reads the Slurm allocation (SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE),
# checks every node, works out --nnodes/--node-rank/--master-addr/port and
# the interfaces, starts torchrun on every node over SSH and supervises them
# as one group. Options gorun decides can still be given; yours win.
#SBATCH --nodes=2 --gpus-per-node=8
gorun --nproc-per-node=8 train.py --lr 3e-4

# Outside Slurm, name the nodes:
#   gorun --hosts node1:8,node2:8 train.py --lr 3e-4
#   gorun --hostfile examples/hostfile train.py --lr 3e-4
# See what would run where, and why, without running anything:
#   gorun --hosts node1:8,node2:8 --dry-run train.py --lr 3e-4
