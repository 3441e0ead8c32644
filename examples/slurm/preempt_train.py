"""The training loop of preempt.sbatch: it saves on SIGUSR1, asks for the
requeue, and resumes from its checkpoint when the job runs again.

Each rank keeps its step in CKPT_DIR/rank<R>.step, written atomically. On
SIGUSR1 (Slurm's warning, passed on by gorun) it saves at once; rank 0
waits until every rank has saved (a training script would use a barrier;
this one needs no torch, so the files are the barrier), then runs
`scontrol requeue $SLURM_JOB_ID`, and Slurm stops the job and starts it
again. A run that finds a checkpoint says "resumed from step N".
No torch is needed: what is shown is the signal path, not the model.

Environment: CKPT_DIR (required), STEPS=200, STEP_SLEEP=0.1.
"""
import os, signal, subprocess, sys, time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
ckpt_dir = os.environ["CKPT_DIR"]
ckpt = os.path.join(ckpt_dir, f"rank{rank}.step")
steps = int(os.environ.get("STEPS", "200"))
step_sleep = float(os.environ.get("STEP_SLEEP", "0.1"))


def save(step):
    tmp = ckpt + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{step}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt)


step = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        step = int(f.read())
    print(f"rank {rank}: resumed from step {step}", flush=True)
else:
    print(f"rank {rank}: starting at step 0", flush=True)

warned = False


def on_usr1(sig, frame):
    global warned
    warned = True


def on_term(sig, frame):
    # Slurm stops the job for the requeue: the checkpoint is already saved.
    print(f"rank {rank}: SIGTERM at step {step}; checkpoint at step {step} kept", flush=True)
    sys.exit(0)


signal.signal(signal.SIGUSR1, on_usr1)
signal.signal(signal.SIGTERM, on_term)
while step < steps:
    time.sleep(step_sleep)
    step += 1
    if step % 20 == 0:
        print(f"rank {rank}: step={step}", flush=True)
    if warned:
        warned = False
        save(step)
        with open(os.path.join(ckpt_dir, f"rank{rank}.saved-{os.environ.get('SLURM_RESTART_COUNT', '0')}"), "w"):
            pass
        print(f"rank {rank}: SIGUSR1: checkpoint saved at step {step}", flush=True)
        if rank == 0:
            run = os.environ.get("SLURM_RESTART_COUNT", "0")
            deadline = time.time() + 30
            while time.time() < deadline and not all(
                    os.path.exists(os.path.join(ckpt_dir, f"rank{r}.saved-{run}")) for r in range(world)):
                time.sleep(0.05)
            job = os.environ.get("SLURM_JOB_ID")
            if job:
                print(f"rank {rank}: asking Slurm to requeue job {job}", flush=True)
                subprocess.run(["scontrol", "requeue", job], check=False)
save(step)
print(f"rank {rank}: done at step {step}", flush=True)
