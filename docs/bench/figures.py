#!/usr/bin/env python3
"""Recompute the figures the docs state from the raw files they cite, and
fail on any mismatch.

usage: figures.py [--root DIR]   (DIR: the repository; default: this file's)

Each figure below names the doc, the raw file, what is computed from the
raw file (every round of it, not its own summary line), and how the doc
writes it. The doc must contain that text exactly: a figure edited away
from its data, or data that no longer gives the figure, fails. A figure
added to the docs with a raw file belongs here. CI runs this (TestFigures
in readme_test.go, which also shows it failing on an altered figure).
"""
import argparse
import math
import os
import re
import statistics
import sys


def rounds(path, who, metric):
    """Every round's value of metric for who ("gorun", "torchrun", "pdsh"),
    from lines like 'round=3 gorun launch_import_all_ms=2913' or
    'round=3 gorun_ms=38789 pdsh_ms=52226'."""
    vals = []
    with open(path) as f:
        for line in f:
            if not line.startswith("round="):
                continue
            fields = line.split()
            if len(fields) > 1 and fields[1] == who:
                m = re.search(r"\b%s=(\d+)" % re.escape(metric), line)
            else:
                m = re.search(r"\b%s_%s=(\d+)" % (re.escape(who), re.escape(metric)), line)
            if m:
                vals.append(int(m.group(1)))
    if not vals:
        sys.exit("figures.py: no %s %s in %s" % (who, metric, path))
    return vals


def ms_range(v):
    return "%d–%d" % (min(v), max(v))


def s_range(v):
    return "%.1f–%.1f s" % (min(v) / 1000, max(v) / 1000)


def median(v):
    """The median as the bench scripts print it: halves round up."""
    return math.floor(statistics.median(v) + 0.5)


def ratio(a, b):
    return "%.2f" % (statistics.median(a) / statistics.median(b))


DEV = "docs/device/h100-1gpu/fidelity/final-81addeb/"
RES = "docs/bench/results/"
JW = "docs/device/h100-1gpu/joinwatch-774a6ff/"


def figures():
    """(doc, raw, the text the doc must contain), each computed here."""
    out = []
    # issue 45's speed figures on one H100 (BENCHMARKS.md's table and compatibility.md's sentence)
    li = DEV + "launch-import.txt"
    g, t = rounds(li, "gorun", "launch_import_all_ms"), rounds(li, "torchrun", "launch_import_all_ms")
    out.append(("docs/BENCHMARKS.md", li, "%d ms (%s) | %d ms (%s), **%s×**" % (median(t), ms_range(t), median(g), ms_range(g), ratio(g, t))))
    cs = DEV + "launch-import-cold-script.txt"
    g, t = rounds(cs, "gorun", "launch_import_all_ms"), rounds(cs, "torchrun", "launch_import_all_ms")
    out.append(("docs/BENCHMARKS.md", cs, "%d ms (%s) | %d ms (%s), **%s×**" % (median(t), ms_range(t), median(g), ms_range(g), ratio(g, t))))
    out.append(("docs/compatibility.md", cs, "%s× (%s against %s ms, %d" % (ratio(g, t), ms_range(g), ms_range(t), len(g))))
    # the first attempt's standby on this 2-core machine (BENCHMARKS.md's table, compatibility.md)
    m = "launch_import_all_ms"
    wc = RES + "launch-import-cold-warmfirst-2026-12-07.txt"
    g, b, t = rounds(wc, "gorun", m), rounds(wc, "before", m), rounds(wc, "torchrun", m)
    out.append(("docs/BENCHMARKS.md", wc, "%d ms (%s) | %d ms (%s), **%s×** | %d ms (%s), %s×" % (
        median(t), ms_range(t), median(g), ms_range(g), ratio(g, t), median(b), ms_range(b), ratio(b, t))))
    out.append(("docs/compatibility.md", wc, "%s× against 7f3dad3's %s× in the same run (%s against %s ms, torchrun %s, %d rounds" % (
        ratio(g, t), ratio(b, t), ms_range(g), ms_range(b), ms_range(t), len(g))))
    wp = RES + "launch-import-pooled-warmfirst-2026-12-07.txt"
    g, b, t = rounds(wp, "gorun", m), rounds(wp, "before", m), rounds(wp, "torchrun", m)
    out.append(("docs/BENCHMARKS.md", wp, "%d ms (%s) | %d ms (%s), %s× | %d ms (%s), %s×" % (
        median(t), ms_range(t), median(g), ms_range(g), ratio(g, t), median(b), ms_range(b), ratio(b, t))))
    # the store watch off the workers' CPUs: here and on one H100 (BENCHMARKS.md's table, compatibility.md)
    jw = JW + "launch-import-cold-script.txt"
    for raw, label in ((RES + "launch-import-cold-joinwatch-2026-12-07.txt", "cold here"), (jw, "cold H100"),
                       (JW + "launch-import-pooled-1.txt", "pooled 1"), (JW + "launch-import-pooled-2.txt", "pooled 2"),
                       (RES + "launch-import-pooled-joinwatch-2026-12-07.txt", "pooled here")):
        g, b, t = rounds(raw, "gorun", m), rounds(raw, "before", m), rounds(raw, "torchrun", m)
        bold = "**" if label.startswith("cold") else ""
        out.append(("docs/BENCHMARKS.md", raw, "| %d ms (%s) | %d ms (%s), %s%s×%s | %d ms (%s), %s× |" % (
            median(t), ms_range(t), median(g), ms_range(g), bold, ratio(g, t), bold, median(b), ms_range(b), ratio(b, t))))
        if label.startswith("cold"):
            out.append(("docs/compatibility.md", raw, "%s× against d87c74b's %s× (%s against %s ms, torchrun %s, %d rounds" % (
                ratio(g, t), ratio(b, t), ms_range(g), ms_range(b), ms_range(t), len(g))))
    # a start-up crash's restart, early and default, on the test cluster (the guide's warm restart)
    cg = RES + "crash-gone-2026-12-07.txt"
    started = re.findall(r"all started ([0-9.]+)(ms|s) after the crash \(target ([0-9.]+s)\)", open(cg).read())
    early = [float(v) for v, u, tgt in started if u == "ms"]
    default = [float(v) for v, u, tgt in started if u == "s"]
    out.append(("docs/guide.md", cg, "started %d–%d ms after a start-up crash on node1, against %.3f–%.3f s with `--warm-restart on`, %d runs" % (
        min(early), max(early), min(default), max(default), len(early))))
    # the stop cases on the test cluster (BENCHMARKS.md, the guide's SSH section)
    sc = open(RES + "stop-cases-2026-12-07.txt").read()
    sec = lambda v: float(v[:-2]) / 1000 if v.endswith("ms") else float(v[:-1])
    cut = [sec(v) for v in re.findall(r"noticed after ([0-9.]+m?s)", sc)]
    ctrlc = [sec(v) for v in re.findall(r"gone ([0-9.]+m?s) after SIGINT", sc)]
    head = [sec(v) * 1000 for v in re.findall(r"gone ([0-9.]+m?s) after SIGKILL of gorun", sc)]
    out.append(("docs/BENCHMARKS.md", RES + "stop-cases-2026-12-07.txt", "the group stopped in %.1f–%.1f s" % (min(cut), max(cut))))
    out.append(("docs/guide.md", RES + "stop-cases-2026-12-07.txt", "%.1f–%.1f s in `TestClusterLinkCut`" % (min(cut), max(cut))))
    out.append(("docs/BENCHMARKS.md", RES + "stop-cases-2026-12-07.txt", "is gone %.2f–%.2f s later" % (min(ctrlc), max(ctrlc))))
    out.append(("docs/BENCHMARKS.md", RES + "stop-cases-2026-12-07.txt", "after SIGKILL of gorun itself, %d–%d ms" % (round(min(head)), round(max(head)))))
    ss = [int(x) for x in re.findall(r"^session_ms=(\d+)", open(RES + "ssh-session-setup-2026-12-07.txt").read(), re.M)]
    out.append(("docs/guide.md", RES + "ssh-session-setup-2026-12-07.txt", "%s ms each for %d sessions" % (ms_range(ss), len(ss))))
    # main_test.go's hostile inputs and stops (the guide)
    mt = open(RES + "main-test.txt").read()
    hi, st = len(re.findall(r"--- PASS: TestHostileInput/", mt)), len(re.findall(r"--- PASS: TestInterrupted/", mt))
    out.append(("docs/guide.md", RES + "main-test.txt", "the real binary through %d such inputs" % hi))
    out.append(("docs/guide.md", RES + "main-test.txt", "output, %d and %d passed" % (hi, st)))
    # an ssh restart that missed its goal (BENCHMARKS.md's restart table)
    sn = open(RES + "restart-ssh-2026-12-05-night.txt").read()
    m = re.search(r"^start_all_ms torchrun_median=(\d+) .*gorun_median=(\d+) gorun_min=(\d+) gorun_max=(\d+) before_median=(\d+) before_min=(\d+) before_max=(\d+) ratio=([0-9.]+)", sn, re.M)
    out.append(("docs/BENCHMARKS.md", RES + "restart-ssh-2026-12-05-night.txt", "| %s ms (local) | %s ms (%s–%s; before: %s ms, %s–%s) | %s |" % m.groups()))
    out.append(("docs/BENCHMARKS.md", RES + "restart-ssh-2026-12-05-night.txt", "goal torchrun's local figure + 0.5 s = %d ms: **not met**" % (int(m.group(1)) + 500)))
    # the end of a successful run (BENCHMARKS.md)
    er = RES + "end-of-run-2026-12-07.txt"
    g, t = rounds(er, "gorun", "end_ms"), rounds(er, "torchrun", "end_ms")
    out.append(("docs/BENCHMARKS.md", er, "torchrun %d ms (%s), gorun %d ms (%s), %s×" % (
        median(t), ms_range(t), median(g), ms_range(g), ratio(g, t))))
    ed = RES + "end-of-run-default-2026-12-07.txt"
    g, b, t = rounds(ed, "gorun", "end_ms"), rounds(ed, "before", "end_ms"), rounds(ed, "torchrun", "end_ms")
    out.append(("docs/BENCHMARKS.md", ed, "torchrun %d ms (%s), gorun 4c273ea %d ms (%s), gorun c255d0a %d ms (%s)" % (
        median(t), ms_range(t), median(b), ms_range(b), median(g), ms_range(g))))
    out.append(("docs/guide.md", ed, "torchrun %s ms, gorun %s ms, %d rounds" % (ms_range(t), ms_range(g), len(g))))
    old = [int(x) for x in re.findall(r"^\d+ new (\d+)", open(RES + "end-of-run-2026-12-06.txt").read(), re.M)]
    out.append(("docs/BENCHMARKS.md", RES + "end-of-run-2026-12-06.txt", "ended %s ms after its last worker line" % ms_range(old)))
    # the restart on a fresh H100 with 774a6ff's build (BENCHMARKS.md's table)
    rr = JW + "restart-device.txt"
    for metric in ("import_all_ms", "launch_import_all_ms"):
        g, t = rounds(rr, "gorun", metric), rounds(rr, "torchrun", metric)
        bold = "**" if metric == "import_all_ms" else ""
        out.append(("docs/BENCHMARKS.md", rr, "| %d ms (%s) | %s%d ms (%s)%s, %s× |" % (
            median(t), ms_range(t), bold, median(g), ms_range(g), bold, ratio(g, t))))
    # gorun _rank's own CPU beside its worker, before and after the join watch (BENCHMARKS.md)
    rc = RES + "rank-cpu-joinwatch-2026-12-07.txt"
    runs = re.split(r"^== run \d+ ", open(rc).read(), flags=re.M)[1:]
    ticks = {"old": [], "head": []}
    for r in runs:
        who = "old" if r.startswith("/tmp/gorun-old") else "head"
        ts = [int(t) for t in re.findall(r"^\s*(\d+) ticks\s+\S+ _rank", r, re.M)]
        ticks[who] += ts + [0] * (2 - len(ts))  # a rank under a tick is not listed
    out.append(("docs/BENCHMARKS.md", rc, "%d–%d ms of CPU per rank (%d–%d ticks of `gorun _rank`, against %d–%d since, %d runs" % (
        10 * min(ticks["old"]), 10 * max(ticks["old"]), min(ticks["old"]), max(ticks["old"]),
        min(ticks["head"]), max(ticks["head"]), len(runs) // 2)))
    # telemetry's overhead with 774a6ff's sampler (BENCHMARKS.md, the guide)
    to = JW + "telemetry/overhead.txt"
    off = re.findall(r"telemetry off ([0-9.]+) steps/s", open(to).read())
    on = re.findall(r"on \(1 s\) ([0-9.]+) steps/s", open(to).read())
    r = statistics.median(map(float, on)) / statistics.median(map(float, off))
    out.append(("docs/BENCHMARKS.md", to, "| telemetry off | %s | %s |" % (", ".join(off), statistics.median(sorted(off, key=float)))))
    out.append(("docs/BENCHMARKS.md", to, "| telemetry on, 1 s | %s | %s |" % (", ".join(on), statistics.median(sorted(on, key=float)))))
    out.append(("docs/BENCHMARKS.md", to, "Ratio of medians on/off: **%.4f**" % r))
    out.append(("docs/guide.md", to, "on an H100: %.4f of the job's steps/s" % r))
    rd = DEV + "restart-device.txt"
    g, t = rounds(rd, "gorun", "import_all_ms"), rounds(rd, "torchrun", "import_all_ms")
    out.append(("docs/BENCHMARKS.md", rd, "%d ms (%s) | **%d ms (%s)**, %s×" % (median(t), ms_range(t), median(g), ms_range(g), ratio(g, t))))
    # 200 nodes over ssh, 32 at a time against pdsh, and all at once (the guide's SSH section)
    l2 = RES + "launch-200.txt"
    g, p = rounds(l2, "gorun", "ms"), rounds(l2, "pdsh", "ms")
    out.append(("docs/guide.md", l2, "%s (median %.1f s) 32 at a time, where pdsh (its own 32 at a time, the baseline) took %s" % (s_range(g), median(g) / 1000, s_range(p))))
    lb = RES + "launch-200-before.txt"
    out.append(("docs/guide.md", lb, "took %s with every agent started at once" % s_range(rounds(lb, "gorun", "ms"))))
    # Ctrl-C during a start, local mode (the guide's Preflight section)
    sd = RES + "stop-during-start-local-2026-12-05.txt"
    v = [int(x) for x in re.findall(r"sigint_to_exit_ms=(\d+)", open(sd).read())]
    out.append(("docs/guide.md", sd, "%s ms over %d stops" % (ms_range(v), len(v))))
    # goodput on one H100 against the job's own clock (the guide's Goodput section)
    import json
    gp = "docs/device/h100-1gpu/goodput/"
    prods, shares = [], []
    for i in (1, 2):
        g = json.load(open(gp + "summary-%d.json" % i))["goodput"]
        parts = {p["key"]: p for p in g["parts"]}
        prods.append("%.3f" % parts["productive"]["seconds"])
        shares.append("%.1f%%" % (100 * parts["startup"]["share"]))
    out.append(("docs/guide.md", gp + "summary-1.json", "productive %s and %s s by gorun's summary" % tuple(prods)))
    out.append(("docs/guide.md", gp + "summary-2.json", "start-up, with the compile, %s and %s of the wall time" % tuple(shares)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = ap.parse_args()
    os.chdir(args.root)
    bad = 0
    figs = figures()
    for doc, raw, text in figs:
        with open(doc) as f:
            body = f.read()
        # the docs wrap lines: compare with every run of white space as one space
        flat = lambda s: re.sub(r"\s+", " ", s)
        if flat(text) not in flat(body):
            print("figures.py: %s does not say %r, which %s gives" % (doc, text, raw))
            bad += 1
    print("figures.py: %d figures checked against their raw files, %d mismatched" % (len(figs), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
