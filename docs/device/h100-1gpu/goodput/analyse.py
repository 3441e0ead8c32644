#!/usr/bin/env python3
"""gorun's goodput (--summary) against the job's own clock: python3 analyse.py"""
import json, os
d = os.path.dirname(os.path.abspath(__file__))
for i in (1, 2):
    s = json.load(open(os.path.join(d, f"summary-{i}.json")))
    g = s["goodput"]
    run = dict(kv.split("=") for kv in open(os.path.join(d, f"run-{i}.txt")).read().split())
    steps = [l.split() for l in open(os.path.join(d, f"steps-{i}.log"))]
    first, last, start = float(steps[0][1]), float(steps[-1][1]), float(run["start"])
    parts = {p["key"]: p for p in g["parts"]}
    prod, own = parts["productive"]["seconds"], last - first
    lead, own_lead = parts["preflight"]["seconds"] + parts["startup"]["seconds"], first - start
    print(f"run {i}: wall {g['wall_seconds']:.3f} s (the harness saw {float(run['end']) - start:.3f} s); goodput {100 * g['goodput']:.1f}%")
    print(f"  productive: gorun {prod:.3f} s, the job's clock {own:.3f} s, {100 * (prod - own) / own:+.2f}%")
    print(f"  launch to first step: gorun {lead:.3f} s (preflight {parts['preflight']['seconds']:.3f} + start-up {parts['startup']['seconds']:.3f}), the job's clock {own_lead:.3f} s from the harness's start, {100 * (lead - own_lead) / own_lead:+.2f}%")
    print(f"  start-up share {100 * parts['startup']['share']:.1f}%, end share {100 * parts['end']['share']:.1f}%")
