import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
os.environ.setdefault('CUDA_VISIBLE_DEVICES', '0')

dist.init_process_group("gloo")
model = torch.nn.Linear(10, 10).to("cuda")
model = DDP(model,
            find_unused_parameters=True)
