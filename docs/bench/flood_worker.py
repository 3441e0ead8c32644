"""A worker for docs/bench/output-flood.sh; $LOCAL_RANK picks its part.

Local rank 0 floods: FLOOD_LINES numbered lines "F <seq> <payload>" as fast
as it can, then "F END <count> <ns spent writing>". The payload's length and
letters follow from seq (floodcheck.go knows the same rule), so a line cut,
glued to another or garbled is seen. Every 200,000th line is 65-125 KB long.
FLOOD_STYLE=chunk (default) writes ~64 KB at a time, cut at offsets that
fall inside lines; FLOOD_STYLE=print makes one write per line, as print()
under `python -u` does. FLOOD_LINES=0: rank 0 stays quiet and idle (the
quiet worker runs alone).

Local rank 1 is the quiet worker: "Q <seq> <time.time_ns()>" every 10 ms for
QUIET_SECONDS, and longer while the flood runs (until $BENCH_DIR/flood.done
appears), then "Q END <count>".
"""

import os
import sys
import time

PAT = b"abcdefghijklmnopqrstuvwxyz" * 5000  # covers offset 25 + 125 KB


def payload_len(seq):
    if seq % 200_000 == 99_999:
        return 65_000 + seq * 13 % 60_000
    return seq * 7 % 151


def flood_line(seq):
    off = seq % 26
    return b"F %d %s\n" % (seq, PAT[off : off + payload_len(seq)])


def write_all(b):
    view = memoryview(b)
    while view:
        view = view[os.write(1, view) :]


def flood(n, style, done):
    t0 = time.monotonic_ns()
    if style == "print":
        for seq in range(n):
            write_all(flood_line(seq))
    else:
        # Cut sizes that put chunk ends inside lines, so the reader must
        # join pieces; one of them is over a pipe's 64 KB.
        sizes = (65_536, 4_093, 777, 70_001, 32_771)
        buf, k = bytearray(), 0
        for seq in range(n):
            buf += flood_line(seq)
            if len(buf) >= 70_001:
                write_all(buf[: sizes[k]])
                del buf[: sizes[k]]
                k = (k + 1) % len(sizes)
        write_all(buf)
    spent = time.monotonic_ns() - t0
    write_all(b"F END %d %d\n" % (n, spent))
    if done:
        open(done, "w").close()


def quiet(seconds, done):
    start = time.monotonic()
    end, cap = start + seconds, start + max(60.0, seconds)  # cap: a flood that never ends
    seq = 0
    while time.monotonic() < end or (done and not os.path.exists(done) and time.monotonic() < cap):
        write_all(b"Q %d %d\n" % (seq, time.time_ns()))
        seq += 1
        time.sleep(0.01)
    write_all(b"Q END %d\n" % seq)


def main():
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    n = int(os.environ.get("FLOOD_LINES", "1000000"))
    seconds = float(os.environ.get("QUIET_SECONDS", "3"))
    bench = os.environ.get("BENCH_DIR", "")
    done = os.path.join(bench, "flood.done") if bench and n > 0 else ""
    if rank == 0:
        if n > 0:
            flood(n, os.environ.get("FLOOD_STYLE", "chunk"), done)
        else:
            time.sleep(seconds)
    elif rank == 1:
        quiet(seconds, done)
    else:
        sys.exit("flood_worker: LOCAL_RANK must be 0 or 1")


if __name__ == "__main__":
    main()
