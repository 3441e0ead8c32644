import os, time, threading
import torch, torch.distributed as dist
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
def train():
    if rank == 1:
        time.sleep(3600)
    dist.all_reduce(torch.ones(2))
t = threading.Thread(target=train, name="trainer")
t.start()
t.join()
