"""What a worker writes to its console, for gorun's console tests.

CONSOLE_MODE picks one:
  bar        a tqdm-like bar: BAR_STEPS updates of "\\r step i/N", no newline,
             BAR_SLEEP seconds apart, then "\\n"; each update carries
             time.time() so a reader can tell when it was written
  alternate  ALT_LINES lines, "out i" on stdout and "err i" on stderr in turn
  crlf       "crlf line\\r\\n", then "no newline at the end" without one
  escape     an escape sequence on stderr as the last line, then exit 3
"""
import os
import sys
import time

mode = os.environ.get("CONSOLE_MODE", "bar")
rank = int(os.environ.get("LOCAL_RANK", "0"))

if mode == "bar":
    steps = int(os.environ.get("BAR_STEPS", "20"))
    pause = float(os.environ.get("BAR_SLEEP", "0.1"))
    for i in range(steps + 1):
        sys.stdout.write("\r step %d/%d t=%.3f" % (i, steps, time.time()))
        sys.stdout.flush()
        if i < steps:
            time.sleep(pause)
    sys.stdout.write("\n")
elif mode == "alternate":
    for i in range(int(os.environ.get("ALT_LINES", "200"))):
        if i % 2 == 0:
            print("out %d" % i, file=sys.stdout, flush=True)
        else:
            print("err %d" % i, file=sys.stderr, flush=True)
elif mode == "crlf":
    sys.stdout.write("crlf line\r\n")
    sys.stdout.write("no newline at the end")
    sys.stdout.flush()
elif mode == "escape":
    sys.stderr.write("boom \x1b[2J\x1b]0;title\x07 cleared\n")
    sys.stderr.flush()
    sys.exit(3)
