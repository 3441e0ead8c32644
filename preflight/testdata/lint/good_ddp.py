"""Train a model with DDP.

Do not set CUDA_VISIBLE_DEVICES here, and never use find_unused_parameters=True
unless needed. backend="gloo" is for CPU runs.
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    model = torch.nn.Linear(10, 10).cuda()
    # model = DDP(model, find_unused_parameters=True)  # was slow
    model = DDP(model, device_ids=[local_rank])
    print("# os.environ['CUDA_VISIBLE_DEVICES'] = '0' is wrong")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
