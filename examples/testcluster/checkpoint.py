"""A worker that saves its state on a signal, for gorun's signal tests.

It needs no torch: the tests are about what each worker is sent, not about
training. Every rank writes marker files to MARK_DIR (a directory every
node sees; the netns test cluster shares this machine's filesystem):

  rank<R>.ready       at start, once its handlers are set
  rank<R>.<signal>    one line (time.time()) for every SIGUSR1, SIGTERM or
                      KeyboardInterrupt it gets: the tests count them
  rank<R>.ckpt        "complete" once its checkpoint is written

Environment knobs (all optional):
  STEPS=600, STEP_SLEEP=0.1   length of the run; each step prints a line
  CKPT_SECS=10                how long the checkpoint takes after SIGTERM
  FLOOD=0                     when 1, every step prints 100 lines of 200 bytes
"""
import os, signal, sys, time

rank = int(os.environ.get("RANK", "0"))
out = os.environ["MARK_DIR"]
ckpt_secs = float(os.environ.get("CKPT_SECS", "10"))
flood = os.environ.get("FLOOD", "0") == "1"


def note(name):
    with open(os.path.join(out, f"rank{rank}.{name}"), "a") as f:
        f.write(f"{time.time()}\n")


def save():
    time.sleep(ckpt_secs)
    with open(os.path.join(out, f"rank{rank}.ckpt"), "w") as f:
        f.write("complete\n")
    print(f"rank {rank}: checkpoint complete", flush=True)


def on_usr1(sig, frame):
    note("usr1")
    print(f"rank {rank}: SIGUSR1: checkpoint requested", flush=True)


def on_term(sig, frame):
    note("term")
    print(f"rank {rank}: SIGTERM: saving for {ckpt_secs:g} s", flush=True)
    save()
    sys.exit(0)


signal.signal(signal.SIGUSR1, on_usr1)
signal.signal(signal.SIGTERM, on_term)
note("ready")
print(f"rank {rank}: ready", flush=True)
try:
    for step in range(int(os.environ.get("STEPS", "600"))):
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.1")))
        if flood:
            line = f"rank {rank} step {step} " + "x" * 180
            for _ in range(100):
                print(line)
        elif step % 10 == 0:
            print(f"rank {rank}: step={step}", flush=True)
except KeyboardInterrupt:
    note("int")
    print(f"rank {rank}: KeyboardInterrupt: saving", flush=True)
    save()
    sys.exit(0)
print(f"rank {rank}: done", flush=True)
