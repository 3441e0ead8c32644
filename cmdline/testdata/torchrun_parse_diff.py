"""Differential check of gorun's command-line parser against torchrun's own.

For every case, torchrun's get_args_parser() parses the argv (as torchrun
2.x does), run()'s --standalone rewrite is applied, and config_from_args()
derives the launch configuration; `gorun --dry-run --preflight off --format
json` parses the same argv. The script reports where one accepts and the
other refuses, or where a value differs, rdzv_endpoint and rdzv_configs
included (taken from torchrun's LaunchConfig, as the agent gets them).

Cases in EARLIER are values torchrun's parser takes but torchrun trips on
once it runs (a rendezvous endpoint it cannot use, port 0, a node rank
beyond --nnodes, an --env for a variable torchrun sets); gorun refuses them
before anything starts. They are reported as EARLIER, not DIFFER, as long as
gorun refuses them and torchrun's parser does not.

Run it where torch is installed:

    python3 cmdline/testdata/torchrun_parse_diff.py path/to/gorun
"""
import contextlib, io, json, re, subprocess, sys, uuid

import torch
from torch.distributed.run import config_from_args, get_args_parser

CASES = [
    ["t.py"],
    ["--nproc-per-node", "2", "t.py"],
    ["--nproc_per_node=4", "t.py", "--lr", "1"],
    ["--nproc-per-node", "gpu", "t.py"],
    ["--nproc-per-node", "auto", "t.py"],
    ["--nproc-per-node", "cpu", "t.py"],
    ["--nnodes", "2", "t.py"],
    ["--nnodes=1:4", "t.py"],
    ["--nnodes", "2:20:30", "t.py"],
    ["--standalone", "--nproc-per-node", "2", "t.py"],
    ["--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "--rdzv-id", "x", "t.py"],
    ["--rdzv_conf", "join_timeout=5,last_call_timeout=1", "--rdzv_backend=c10d", "t.py"],
    ["--max-restarts", "3", "t.py"],
    ["--monitor-interval", "0.5", "t.py"],
    ["--start-method", "fork", "t.py"],
    ["--start-method", "thread", "t.py"],
    ["--role", "trainer", "t.py"],
    ["-m", "pkg.train"],
    ["--module", "pkg.train", "--x"],
    ["--no-python", "./run.sh"],
    ["--no-python", "-m", "t.py"],
    ["--run-path", "/abs/t.py"],
    ["--log-dir", "/tmp/logs", "-r", "3", "-t", "0:1,1:2", "t.py"],
    ["-r3", "t.py"],
    ["--redirect", "3", "t.py"],
    ["--local-ranks-filter", "0,1", "t.py"],
    ["--node-rank", "1", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "1234", "t.py"],
    ["--master_addr=10.0.0.1", "--master_port=1234", "t.py"],
    ["--local-addr", "10.0.0.2", "t.py"],
    ["--numa-binding", "node", "t.py"],
    ["--numa-binding", "rack", "t.py"],
    ["--signals-to-handle", "SIGTERM,SIGUSR1", "t.py"],
    ["--virtual-local-rank", "t.py"],
    ["t.py", "--nnodes", "3", "--nproc-per-node", "9"],
    ["--nproc-per-node", "2", "t.py", "--", "--x"],
    ["--", "t.py", "--x"],
    ["--max-restarts", "x", "t.py"],
    ["--master-port", "abc", "t.py"],
    ["--bogus", "t.py"],
    ["--nproc-per-node"],
    [],
    ["--nproc", "2", "t.py"],
    ["--max", "2", "t.py"],
    ["--master", "h", "t.py"],
    ["--rdzv", "c10d", "t.py"],
    ["--node_rank", "2", "--nnodes", "3", "t.py"],
    ["--tee", "5", "t.py"],
    ["--redirects", "0:3,1:0", "t.py"],
    ["--rdzv-endpoint", "h:29400", "t.py"],
    ["--rdzv_endpoint=[::1]:29400", "t.py"],
    ["--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "t.py"],
    ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "t.py"],
    ["--master-addr", "::1", "t.py"],
    ["--rdzv_conf", " a = 1 ,b=2", "--node_rank", "1", "--nnodes", "2", "t.py"],
    ["--rdzv-conf", "a", "t.py"],
]

# Accepted by torchrun's parser, refused by gorun because torchrun would
# only fail later (or, for port 0 and torchrun's own variables, run wrong).
EARLIER = [
    ["--rdzv-endpoint", "host:abc", "t.py"],
    ["--rdzv-endpoint", "host:99999", "t.py"],
    ["--rdzv-endpoint", "host:-5", "t.py"],
    ["--rdzv-endpoint", "[::1", "t.py"],
    ["--rdzv-endpoint", "::1:29500", "t.py"],
    ["--rdzv-endpoint", "", "t.py"],
    ["--rdzv-endpoint", ":29500", "t.py"],
    ["--rdzv-endpoint", "host", "t.py"],
    ["--rdzv-endpoint", "10.0.0.1:0", "t.py"],
    ["--rdzv-backend", "c10d", "--nnodes", "2", "--rdzv-endpoint", "h:0", "t.py"],
    ["--master-addr", "", "t.py"],
    ["--master-port", "0", "t.py"],
    ["--master-port", "65536", "t.py"],
    ["--node-rank", "5", "--nnodes", "2", "t.py"],
    ["--node-rank", "4", "--nnodes", "1:4", "t.py"],
    ["--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "1234", "t.py"],
    ["--env", "MASTER_ADDR=x", "t.py"],
]

FIELDS = ["nproc_per_node", "rdzv_backend", "rdzv_id", "max_restarts", "monitor_interval",
          "start_method", "role", "module", "no_python", "run_path", "log_dir", "redirects", "tee",
          "node_rank", "master_addr", "master_port", "local_addr", "numa_binding",
          "signals_to_handle", "virtual_local_rank", "training_script", "training_script_args",
          "standalone", "local_ranks_filter", "rdzv_endpoint", "rdzv_configs"]

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def torchrun(argv):
    argv = [a for a in argv]
    if "--env" in argv:  # gorun's own option: torchrun never sees it
        i = argv.index("--env")
        del argv[i:i + 2]
    p = get_args_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = p.parse_args(argv)
    except SystemExit:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "error"
    if a.standalone:  # run() does this before config_from_args
        a.rdzv_backend, a.rdzv_endpoint, a.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    d = dict(vars(a))
    out = {k: d.get(k) for k in FIELDS}
    n = str(d["nnodes"]).split(":")
    out["nnodes"] = (int(n[0]), int(n[-1])) if len(n) <= 2 and all(x.isdigit() for x in n) else d["nnodes"]
    try:  # what torchrun refuses after parsing (it rewrites some args in place)
        with contextlib.redirect_stderr(io.StringIO()):
            config, _, _ = config_from_args(a)
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return None, f"config_from_args: {type(e).__name__}: {e}"
    # The agent gets these from the LaunchConfig, not from the arguments.
    out["rdzv_endpoint"] = config.rdzv_endpoint
    out["rdzv_configs"] = dict(config.rdzv_configs)
    return out, None


def gorun(binary, argv):
    r = subprocess.run([binary, "--dry-run", "--preflight", "off", "--format", "json", *argv],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    c = json.loads(r.stdout)["config"]
    out = {k: c.get(k) for k in FIELDS}
    out["nnodes"] = (c["nnodes_min"], c["nnodes_max"])
    return out, None


def norm(k, v):
    if k == "max_restarts" or k == "node_rank" or k == "master_port":
        return int(v) if v is not None and str(v).lstrip("-").isdigit() else v
    if k == "nproc_per_node":  # gorun's JSON has a number; argparse a string
        return str(v).strip()
    if k == "rdzv_id" and isinstance(v, str) and UUID4.match(v):
        return "<uuid4>"
    if k == "rdzv_configs":  # torchrun adds the rank as an int
        return {str(a): str(b) for a, b in (v or {}).items()}
    if k == "monitor_interval":
        return float(v)
    if k in ("log_dir", "local_addr", "numa_binding") and v in (None, ""):
        return None
    if k == "training_script_args":
        return list(v or [])
    return v


def main():
    binary = sys.argv[1]
    print(f"torch {torch.__version__} ({torch.__file__})")
    agree = differ = earlier = 0
    for argv in EARLIER:
        t, terr = torchrun(argv)
        g, gerr = gorun(binary, argv)
        if t is not None and g is None:
            earlier += 1
            print(f"EARLIER {argv}: torchrun's parser accepts; gorun refuses: {gerr}")
        else:
            differ += 1
            print(f"DIFFER {argv}: expected torchrun's parser to accept and gorun to refuse; "
                  f"torchrun {'refuses: ' + terr if t is None else 'accepts'}; "
                  f"gorun {'refuses: ' + gerr if g is None else 'accepts'}")
    for argv in CASES:
        t, terr = torchrun(argv)
        g, gerr = gorun(binary, argv)
        if t is None and g is None:
            agree += 1
            print(f"AGREE refuse {argv}\n    torchrun: {terr}\n    gorun:    {gerr}")
            continue
        if (t is None) != (g is None):
            differ += 1
            print(f"DIFFER {argv}: torchrun {'refuses: ' + terr if t is None else 'accepts'}; "
                  f"gorun {'refuses: ' + gerr if g is None else 'accepts'}")
            continue
        bad = [k for k in FIELDS if norm(k, t[k]) != norm(k, g[k])]
        if t["nnodes"] != g["nnodes"] and not isinstance(t["nnodes"], str):
            bad.append("nnodes")
        if bad:
            differ += 1
            print(f"DIFFER {argv}: " + ", ".join(f"{k}: torchrun {t.get(k)!r} gorun {g.get(k)!r}" for k in bad))
        else:
            agree += 1
            print(f"AGREE accept {argv}")
    print(f"{agree} agree, {earlier} refused earlier by gorun, {differ} differ")


main()
