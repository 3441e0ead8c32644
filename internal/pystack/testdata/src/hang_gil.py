import ctypes, os, threading, time
import torch, torch.distributed as dist
dist.init_process_group("gloo"); print(f"rank {dist.get_rank()} joined", flush=True)
def hold_gil():  # libc's sleep, called with the GIL held: no other thread of the rank runs Python again
    time.sleep(0.5)
    ctypes.PyDLL(None).sleep(3600)
if dist.get_rank() == int(os.environ.get("HANG_RANK", "4")):
    threading.Thread(target=hold_gil, daemon=True).start()  # by the time it holds the GIL, the main thread waits in the first all_reduce
else:
    time.sleep(2)
t = torch.ones(4); dist.all_reduce(t)
dist.all_reduce(t)
