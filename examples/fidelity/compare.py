# Lists every difference between what the ranks of two runs of a probe
# observed (probe.py, or a script of cases/), and fails on any that
# the allowlist of docs/compatibility.md ("What a pooled worker guarantees") does not name for
# the run.
#
#   compare.py BASELINE_DIR RUN_DIR --label LABEL [--readme docs/compatibility.md]
#
# BASELINE_DIR holds torchrun's rank*.json (and rank*.atexit), RUN_DIR
# gorun's. LABEL (cold: --prewarm off; pooled, ssh, restart, case: with
# the pool) picks the allowlist's rows: a row applies where its "runs"
# cell says "all", "pooled" (every label but cold), or the label. With
# LABEL pool, BASELINE_DIR is gorun's own cold run (--prewarm off) and
# only "pooled" rows apply: what the pool alone changes. Exit 0: no
# difference outside the allowlist; 1: some; 2: bad input.
import argparse
import fnmatch
import glob
import json
import os
import re
import sys


def load(d):
    ranks = {}
    for path in glob.glob(os.path.join(d, "rank*.json")):
        r = os.path.basename(path)[4:-5]
        with open(path) as f:
            ranks[r] = json.load(f)
        at = path[:-5] + ".atexit"
        ranks[r]["atexit.ran"] = json.load(open(at)) if os.path.exists(at) else "did not run"
    return ranks


def flatten(prefix, v, out):
    if isinstance(v, dict) and not prefix.endswith("~rank"):
        for k, x in v.items():
            flatten(prefix + "." + k if prefix else k, x, out)
    else:
        out[prefix] = v


def per_rank(ranks):
    # Values each process draws for itself become whether they differ
    # across ranks (and, within one rank's list, across its items).
    flat = {}
    for r, o in ranks.items():
        flat[r] = {}
        flatten("", o, flat[r])
    keys = {k for f in flat.values() for k in f if "~rank" in k}
    for k in keys:
        vals = [json.dumps(f.get(k), sort_keys=True) for f in flat.values()]
        distinct = "distinct across ranks" if len(set(vals)) == len(vals) else "shared by ranks"
        for f in flat.values():
            if isinstance(f.get(k), str) and f[k].startswith("error:"):
                continue
            f[k] = distinct
    return flat


def allowlist(readme):
    rows = []
    with open(readme) as f:
        text = f.read()
    m = re.search(r"<!-- fidelity-allowlist -->(.*?)<!-- /fidelity-allowlist -->", text, re.S)
    if not m:
        sys.exit("compare.py: no fidelity allowlist in %s" % readme)
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        rows.append((cells[0].strip("`"), [x.strip() for x in cells[1].split(",")], cells[2]))
    return rows


def applies(runs, label):
    # "all"; "pooled": every run but --prewarm off's ("cold"); or the
    # label. Against gorun's own cold run ("pool") only "pooled" rows:
    # both have gorun's plan and supervision.
    if label == "pool":
        return "pooled" in runs
    return "all" in runs or label in runs or ("pooled" in runs and label != "cold")


def differences(a, b):
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, "missing"), b.get(k, "missing")
        if x == y:
            continue
        if isinstance(x, list) and isinstance(y, list) and k == "env.keys":
            for e in sorted(set(map(str, y)) - set(map(str, x))):
                out.append(("%s+%s" % (k, e), "absent", "present"))
            for e in sorted(set(map(str, x)) - set(map(str, y))):
                out.append(("%s-%s" % (k, e), "present", "absent"))
            if not [o for o in out if o[0].startswith(k)]:
                out.append((k + ".order", x, y))
            continue
        out.append((k, x, y))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline")
    ap.add_argument("run")
    ap.add_argument("--label", required=True)
    ap.add_argument("--readme", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "compatibility.md"))
    args = ap.parse_args()
    a, b = load(args.baseline), load(args.run)
    if not a or set(a) != set(b):
        print("compare.py: ranks differ: baseline %s, run %s" % (sorted(a), sorted(b)))
        sys.exit(1 if a else 2)
    rows = allowlist(args.readme)
    fa, fb = per_rank(a), per_rank(b)
    bad = 0
    seen = 0
    for r in sorted(fa):
        for k, x, y in differences(fa[r], fb[r]):
            seen += 1
            why = next((w for pat, runs, w in rows if fnmatch.fnmatchcase(k, pat) and applies(runs, args.label)), None)
            if why is None:
                bad += 1
                print("DIFFERS rank %s %s: torchrun %s, gorun (%s) %s" % (r, k, json.dumps(x)[:300], args.label, json.dumps(y)[:300]))
            else:
                print("allowed rank %s %s: torchrun %s, gorun %s (%s)" % (r, k, json.dumps(x)[:120], json.dumps(y)[:120], why[:100]))
    n = len(fa[next(iter(fa))])
    print("compare.py %s: %d observables on %d ranks, %d differences, %d outside the allowlist" % (args.label, n, len(fa), seen, bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
