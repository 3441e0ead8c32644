import torch
import torch.distributed as dist

dist.init_process_group(backend="nccl")
x = torch.ones(1, device="cuda")
if os.environ["CUDA_VISIBLE_DEVICES"] == "0":
    print("first GPU")
dist.all_reduce(x)
