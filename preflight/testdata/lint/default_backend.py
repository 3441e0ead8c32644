import torch.distributed as dist
dist.init_process_group()
os.putenv("CUDA_VISIBLE_DEVICES", "3")
