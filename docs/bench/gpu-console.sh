#!/usr/bin/env bash
# The worker's console and learned hang limits on a GPU machine, through the
# real gorun and the machine's torchrun (torch 2.x):
#   1. under a pseudo-terminal (script(1), else Python's pty), every rank's
#      stdout and stderr are terminals of its size, under gorun as under
#      torchrun; off a terminal, pipes under both;
#   2. local rank 0 reads gorun's stdin (a pipe), the others /dev/null;
#   3. --hang-timeout auto --hang-timeout-floor 5s: two short runs of a CUDA
#      script that prints every 0.5 s teach its silences, then a run that
#      hangs is caught within the learned limit plus 5 s.
#   usage: GORUN=path [TORCHRUN=cmd] [DEVICE=cpu] bash docs/bench/gpu-console.sh OUTDIR
set -uo pipefail
out=${1:?usage: gpu-console.sh OUTDIR}
gorun=${GORUN:?set GORUN to the gorun binary}
torchrun=${TORCHRUN:-$(command -v torchrun)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME=$work/cache TERM=dumb NO_COLOR=1
onpty() { # onpty COLS ROWS CMD...: CMD on a pseudo-terminal of that size
  local cols=$1 rows=$2; shift 2
  python3 - "$cols" "$rows" "$@" <<'PY'
import fcntl, os, pty, struct, sys, termios
cols, rows, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    sys.stdout.buffer.write(b.replace(b"\r\n", b"\n"))
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
PY
}
cat >"$work/tty.py" <<'PY'
import os, sys, torch
torch.ones(1, device=os.environ.get("DEVICE", "cuda"))
def size():
    try:
        return os.get_terminal_size()
    except OSError as e:
        return f"no size ({e.strerror})"
r = os.environ["LOCAL_RANK"]
print(f"rank {r}: stdout tty {sys.stdout.isatty()}, stderr tty {sys.stderr.isatty()}, size {size()}", flush=True)
PY
cat >"$work/stdin.py" <<'PY'
import os
r = os.environ["LOCAL_RANK"]
try:
    print(f"rank {r} read {input()!r}", flush=True)
except EOFError:
    print(f"rank {r} read EOF", flush=True)
PY
cat >"$work/learn.py" <<'PY'
import os, time, torch
dev = os.environ.get("DEVICE", "cuda")
x = torch.ones(1 << 20, device=dev)
r = os.environ["RANK"]
for step in range(6):
    x = x * 1.0001
    if dev == "cuda": torch.cuda.synchronize()
    print(f"rank {r} step {step}", flush=True)
    if step == 2 and os.environ.get("HANG") == "1":
        print(f"rank {r} hanging", flush=True)
        time.sleep(3600)
    time.sleep(0.5)
PY
{
  echo "== gorun on a 97x31 pseudo-terminal"
  onpty 97 31 "$gorun" --torchrun "$torchrun" --nproc_per_node 2 "$work/tty.py" | grep '^rank\|^\[' ; echo "exit ${PIPESTATUS[0]}"
  echo "== torchrun on a 97x31 pseudo-terminal"
  onpty 97 31 "$torchrun" --nproc_per_node 2 "$work/tty.py" | grep '^rank\|^\['; echo "exit ${PIPESTATUS[0]}"
  echo "== gorun off a terminal"
  "$gorun" --torchrun "$torchrun" --nproc_per_node 2 "$work/tty.py" 2>&1 | grep 'rank [01]:'
  echo "== torchrun off a terminal"
  "$torchrun" --nproc_per_node 2 "$work/tty.py" 2>&1 | grep 'rank [01]:'
  echo "== gorun, stdin a pipe"
  printf 'hello\n' | "$gorun" --torchrun "$torchrun" --nproc_per_node 2 "$work/stdin.py" 2>&1 | grep 'read'
} >"$out/console.txt" 2>&1
{
  for i in 1 2; do
    echo "== learning run $i"
    "$gorun" --torchrun "$torchrun" --nproc_per_node 2 --hang-timeout auto --hang-timeout-floor 5s "$work/learn.py" 2>&1 | grep 'gorun: hangs'; echo "exit ${PIPESTATUS[0]}"
  done
  echo "== the run that hangs (each line with the seconds since the start)"
  HANG=1 "$gorun" --torchrun "$torchrun" --nproc_per_node 2 --hang-timeout auto --hang-timeout-floor 5s --env HANG=1 "$work/learn.py" 2>&1 |
    python3 -u -c 'import sys, time; t = time.time(); [print(f"{time.time() - t:6.2f} {l}", end="", flush=True) for l in sys.stdin]' |
    grep -v 'gorun:     \|Extension'
  echo "record:"; cat "$XDG_CACHE_HOME"/gorun/hangtime/*.json
} >"$out/learned.txt" 2>&1
echo "done: $out"
