import os, torch, torch.distributed as dist
dist.init_process_group("cpu:gloo,cuda:nccl")
device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}")
x = torch.ones(1, device=device)
