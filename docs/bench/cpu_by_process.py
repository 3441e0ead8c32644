#!/usr/bin/env python3
"""The CPU each process of a command's tree used while it ran, from
/proc/PID/stat sampled every 50 ms (utime + stime, in clock ticks of
1/100 s; a process that ends between two samples loses its last 50 ms).

usage: cpu_by_process.py COMMAND [ARGS...]
Prints one line per process of the command's tree that used a tick or
more: its ticks and its command line. Used for `gorun _rank`'s own CPU
beside its worker (docs/BENCHMARKS.md, "The store watch off the workers'
CPUs").
"""
import os
import subprocess
import sys
import time


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(") ", 1)[1].split()[1])


def main():
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree, seen = {p.pid}, {}
    while p.poll() is None:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            try:
                if pid not in tree and parent(pid) in tree:
                    tree.add(pid)
                if pid not in tree:
                    continue
                with open(f"/proc/{pid}/stat") as f:
                    rest = f.read().rsplit(") ", 1)[1].split()
                ticks = int(rest[11]) + int(rest[12])
                if pid not in seen:
                    with open(f"/proc/{pid}/cmdline") as f:
                        seen[pid] = [f.read().replace("\0", " ").strip()[:90], 0]
                seen[pid][1] = ticks
            except (OSError, IndexError, ValueError):
                pass  # gone between the listing and the read
        time.sleep(0.05)
    for pid, (cmd, ticks) in sorted(seen.items()):
        if ticks > 0:
            print("%4d ticks  %s" % (ticks, cmd))


if __name__ == "__main__":
    main()
