"""Compares gorun's figures (preflight --bandwidth node --json) with
bw_independent.py's: prints each pair of figures and their ratio.
  python3 bw_compare.py GORUN.json INDEPENDENT.jsonl"""
import json, sys

rep = json.load(open(sys.argv[1]))
bw = rep["nodes"][0]["facts"].get("bandwidth") or {}
ind = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
rows = []
for r in ind:
    if r["kind"] == "host":
        g = [h for h in bw.get("host", []) if h["gpu"] == r["gpu"] and h["local"]]
        if g:
            rows += [("GPU%d H2D" % r["gpu"], g[0]["h2d_gbs"], r["h2d_gbs"]), ("GPU%d D2H" % r["gpu"], g[0]["d2h_gbs"], r["d2h_gbs"])]
    elif r["kind"] == "p2p":
        for p in bw.get("p2p", []):
            if (p["src"], p["dst"]) == (r["src"], r["dst"]):
                rows.append(("P2P %d->%d uni" % (r["src"], r["dst"]), p["uni_gbs"], r["uni_gbs"]))
            elif (p["dst"], p["src"]) == (r["src"], r["dst"]) and p.get("reverse_uni_gbs"):
                rows.append(("P2P %d->%d uni" % (r["src"], r["dst"]), p["reverse_uni_gbs"], r["uni_gbs"]))
    elif r["kind"] == "allreduce":
        for a in bw.get("allreduce", []):
            if a["bytes"] == r["bytes"]:
                key = "busbw_gbs" if r["ranks"] > 1 else "algbw_gbs"
                rows.append(("all_reduce %d MiB %s" % (r["bytes"] >> 20, key[:5]), a[key], r[key]))
worst = 0
for name, g, i in rows:
    d = abs(g - i) / i * 100 if i else 0
    print("%-28s gorun %9.1f  independent %9.1f GB/s  diff %5.1f%%" % (name, g, i, d))
print("rows %d" % len(rows))
