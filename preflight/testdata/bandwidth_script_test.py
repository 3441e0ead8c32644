"""Unit tests of preflight/bandwidth.py's helpers, on CPU (run by
TestBandwidthScriptUnit, or: python3 preflight/testdata/bandwidth_script_test.py)."""
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "bandwidth.py")
spec = importlib.util.spec_from_file_location("bandwidth", SCRIPT)
bw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bw)
import torch  # noqa: E402


class Helpers(unittest.TestCase):
    def test_cpulist_round_trip(self):
        for s, cpus in [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", [])]:
            self.assertEqual(bw.cpulist(s), cpus)
            self.assertEqual(bw.fmt_cpus(cpus), s)

    def test_parse(self):
        a = bw.parse(["cross", "--rank", "1", "--master", "h:1", "--no-allreduce", "--p2p-bytes", "4096"])
        self.assertEqual(a, {"mode": "cross", "rank": "1", "master": "h:1", "no_allreduce": True, "p2p_bytes": "4096"})

    def test_pattern_is_deterministic_and_salted(self):
        a = bw.pattern(torch, 1 << 16, 3, "cpu")
        self.assertTrue(torch.equal(a, bw.pattern(torch, 1 << 16, 3, "cpu")))
        self.assertFalse(torch.equal(a, bw.pattern(torch, 1 << 16, 4, "cpu")))
        self.assertGreater(len(torch.unique(a)), (1 << 14) - 10)  # not a short cycle

    def test_damage_is_found(self):
        want = bw.pattern(torch, 1 << 16, 1, "cpu")
        got = want.clone()
        self.assertEqual(bw.mismatches(torch, got, want), (0, -1))
        bw.damage(torch, got)
        self.assertEqual(bw.mismatches(torch, got, want), (1, 12345))


class StepsTest(unittest.TestCase):
    def run_steps(self, env, fn):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                res = bw.Steps().run("p2p 0<->1", 5, fn)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return res, [json.loads(l) for l in out.getvalue().splitlines()]

    def test_begin_end_and_result(self):
        res, ev = self.run_steps({}, lambda: 42)
        self.assertEqual(res, 42)
        self.assertEqual([e["event"] for e in ev], ["begin", "end"])
        self.assertEqual(ev[0]["limit_s"], 5)

    def test_error_is_reported_not_raised(self):
        res, ev = self.run_steps({}, lambda: 1 / 0)
        self.assertIsNone(res)
        self.assertEqual([e["event"] for e in ev], ["begin", "error", "end"])
        self.assertIn("ZeroDivisionError", ev[1]["msg"])

    def test_limit_cap_hook(self):
        _, ev = self.run_steps({"GORUN_BW_TEST_LIMIT_S": "0.5"}, lambda: None)
        self.assertEqual(ev[0]["limit_s"], 0.5)

    def test_stall_hook_ends_the_process(self):
        # The script's own watchdog ends a stalled step 1 s past its limit
        # (gorun kills it 0.5 s past): run in a child, as gorun does.
        code = ("import importlib.util,sys;s=importlib.util.spec_from_file_location('b',%r);"
                "b=importlib.util.module_from_spec(s);s.loader.exec_module(b);"
                "b.Steps().run('host 0 local',0.3,lambda:None)") % SCRIPT
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, GORUN_BW_TEST_STALL="host"))
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(p.returncode, 3)
        ev = [json.loads(l)["event"] for l in p.stdout.splitlines()]
        self.assertEqual(ev, ["begin", "stalled"])


class CPUNode(unittest.TestCase):
    def test_no_gpus_said_once(self):
        p = subprocess.run([sys.executable, SCRIPT, "node"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        notes = [json.loads(l) for l in p.stdout.splitlines() if '"note"' in l]
        self.assertEqual(len(notes), 1)
        self.assertTrue(notes[0]["msg"].startswith("no GPUs"))


if __name__ == "__main__":
    unittest.main()
