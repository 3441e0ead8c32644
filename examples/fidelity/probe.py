# What a training script can observe of the process it runs in, recorded
# by every rank as JSON: the fidelity suite runs it under torchrun and
# under gorun (cold, pooled, over ssh, a restarted attempt) and
# compare.py lists every difference outside docs/compatibility.md's allowlist ("What a
# pooled worker guarantees").
#
#   probe.py [ARGS...]    writes $FIDELITY_OUT/rank$RANK.json
#
# A key ending in "~rank" holds a value each process draws for itself
# (seeds, hash randomisation): compare.py checks that every rank's differs
# from the others', as under torchrun, not the values. Nothing here sets
# anything before `import torch`: the cases of cases.py do.
import sys

# The first line's view, before any import of the script's own.
_FIRST = {
    "modules.count_first_line": len(sys.modules),
    "main.keys_first_line": sorted(k for k in globals() if not k.startswith("_FIRST")),
}
import os  # noqa: E402
import time  # noqa: E402

_T0 = time.monotonic()

_FIRST["threads.native_first_line"] = len(os.listdir("/proc/self/task"))

import atexit  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402

_FIRST["gc.frozen_first_line"] = gc.get_freeze_count() > 0

import torch  # noqa: E402

OUT = os.environ.get("FIDELITY_OUT", ".")
RANK = os.environ.get("RANK", "0")
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
_atexit_order = []


def _after_import_handler():
    _atexit_order.append("registered after import torch")
    with open(os.path.join(OUT, "rank%s.atexit" % RANK), "w") as f:
        json.dump(_atexit_order, f)


atexit.register(_after_import_handler)


class MainDataset(torch.utils.data.Dataset):
    # Defined in __main__: spawn and forkserver workers unpickle it by
    # importing the script again, as __mp_main__.
    def __len__(self):
        return 2

    def __getitem__(self, i):
        import numpy

        return torch.tensor([float(torch.initial_seed() % 1000003), float(numpy.random.randint(1 << 30)), float(random.random())])


def record(out, name, fn):
    try:
        out[name] = fn()
    except Exception as e:  # what failed is an observable too
        out[name] = "error: %s" % type(e).__name__


def fd_kind(fd):
    try:
        target = os.readlink("/proc/self/fd/%d" % fd)
    except OSError:
        return "?"
    for kind in ("pipe:", "socket:", "anon_inode:"):
        if target.startswith(kind):
            return kind.rstrip(":") if kind != "anon_inode:" else target
    if target.startswith("/memfd:"):
        return "memfd:" + target[7:].split(" ")[0]
    if target.startswith("/dev/pts/"):
        return "pty"
    return target


def fds():
    out = {}
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        try:
            inh = os.get_inheritable(fd)
        except OSError:
            continue  # the listing's own fd
        out[str(fd)] = "%s%s" % (fd_kind(fd), " inheritable" if inh else "")
    return out


def signals():
    out = {}
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP) or not isinstance(s, signal.Signals):
            continue
        h = signal.getsignal(s)
        out[s.name] = {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore"}.get(h, getattr(h, "__name__", repr(h)))
    return out


def status_field(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()


def prctl(option, pointer=False):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if not pointer:
        return libc.prctl(option, 0, 0, 0, 0)
    v = ctypes.c_int(0)
    libc.prctl(option, ctypes.byref(v), 0, 0, 0)
    return v.value


def rlimits():
    import resource

    return {n: list(resource.getrlimit(getattr(resource, n))) for n in dir(resource) if n.startswith("RLIMIT_")}


def warnings_filters():
    return [[a, getattr(m, "pattern", m), c.__name__, getattr(mod, "pattern", mod), ln] for a, m, c, mod, ln in warnings.filters]


def cmdline():
    with open("/proc/self/cmdline", "rb") as f:
        return [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]


def parent_comm():
    with open("/proc/%d/comm" % os.getppid()) as f:
        return f.read().strip()


def loaders(method, workers):
    if method not in torch.multiprocessing.get_all_start_methods():
        return "absent"
    kw = {"multiprocessing_context": method} if method else {}
    dl = torch.utils.data.DataLoader(MainDataset(), batch_size=1, num_workers=workers, **kw)
    rows = [b[0].tolist() for b in dl]
    return {"batches": len(rows), "seeds~rank": [r[0] for r in rows], "numpy~rank": [r[1] for r in rows]}


def compiled():
    if not hasattr(torch, "compile"):
        return "absent"

    def f(x):
        return torch.sin(x) * 2 + 1

    x = torch.arange(4.0)
    return bool(torch.allclose(torch.compile(f)(x), f(x)))


def tracebacks():
    import traceback

    def fails():
        raise ValueError("probe")

    try:
        fails()
    except ValueError:
        return [os.path.basename(fs.filename) + ":" + fs.name for fs in traceback.extract_tb(sys.exc_info()[2])]


def caught_warning():
    with warnings.catch_warnings(record=True) as w:
        warnings.warn("probe", UserWarning)
    return [str(x.category.__name__) for x in w]


def logging_state():
    import logging

    root = logging.getLogger()
    return {"root_level": root.level, "root_handlers": [type(h).__name__ for h in root.handlers],
            "torch_handlers": [type(h).__name__ for h in logging.getLogger("torch").handlers]}


def collective():
    import torch.distributed as dist

    # NCCL where every local rank has a GPU of its own (it refuses two
    # ranks on one), gloo otherwise.
    backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1")) else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(LOCAL_RANK)
    dist.init_process_group(backend)
    t = torch.ones(4, device="cuda" if backend == "nccl" else "cpu") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return {"backend": backend, "ok": t.tolist() == [world * (world + 1) / 2] * 4}


def main():
    import numpy

    o = dict(_FIRST)
    me = sys.modules["__main__"]
    if os.environ.get("FIDELITY_CRASH_ATTEMPT") == os.environ.get("TORCHELASTIC_RESTART_COUNT"):
        sys.exit(3)  # the restarted attempt's run: this one fails
    # Seeds and what a process draws for itself (compared across ranks).
    record(o, "rng.torch_initial_seed~rank", torch.initial_seed)
    record(o, "rng.torch_rand~rank", lambda: torch.rand(2).tolist())
    record(o, "rng.numpy_legacy~rank", lambda: int(numpy.random.randint(1 << 30)))
    record(o, "rng.python_random~rank", random.random)
    record(o, "rng.hash~rank", lambda: hash("gorun fidelity"))
    record(o, "rng.hashseed_env", lambda: os.environ.get("PYTHONHASHSEED"))
    record(o, "rng.dropout~rank", lambda: torch.nn.functional.dropout(torch.ones(16), 0.5).tolist())
    # How it was started.
    record(o, "sys.argv", lambda: sys.argv)
    record(o, "sys.orig_argv", lambda: getattr(sys, "orig_argv", None))
    record(o, "proc.cmdline", cmdline)
    record(o, "proc.comm", lambda: open("/proc/self/comm").read().strip())
    record(o, "proc.parent_comm", parent_comm)
    record(o, "main.__file__", lambda: me.__file__)
    record(o, "main.__name__", lambda: me.__name__)
    record(o, "main.__spec__", lambda: me.__spec__ and [me.__spec__.name, me.__spec__.origin, type(me.__spec__.loader).__name__])
    record(o, "main.__package__", lambda: me.__package__)
    record(o, "main.__loader__", lambda: type(me.__loader__).__name__)
    record(o, "main.__cached__", lambda: me.__dict__.get("__cached__", "missing"))
    record(o, "sys.path", lambda: sys.path)
    record(o, "sys.executable", lambda: sys.executable)
    record(o, "sys.flags", lambda: repr(sys.flags))
    record(o, "sys.warnoptions", lambda: sys.warnoptions)
    record(o, "sys.xoptions", lambda: sys._xoptions)
    record(o, "sys.recursionlimit", sys.getrecursionlimit)
    record(o, "sys.switchinterval", sys.getswitchinterval)
    record(o, "sys.hooks", lambda: [sys.excepthook is sys.__excepthook__, sys.displayhook is sys.__displayhook__,
                                    sys.breakpointhook is sys.__breakpointhook__, sys.unraisablehook is sys.__unraisablehook__,
                                    threading.excepthook is threading.__excepthook__, sys.gettrace() is None, sys.getprofile() is None])
    record(o, "sys.import_machinery", lambda: [[type(f).__name__ if not isinstance(f, type) else f.__name__ for f in sys.meta_path],
                                               len(sys.path_hooks), __import__("builtins").__import__.__module__])
    record(o, "sys.exc_info", lambda: repr(sys.exc_info()))
    record(o, "sys.dont_write_bytecode", lambda: sys.dont_write_bytecode)
    record(o, "stdio", lambda: {n: [type(s).__name__, s.encoding, s.errors, s.line_buffering, getattr(s, "write_through", None), s.isatty(), os.get_blocking(s.fileno())]
                                for n, s in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr)) if s is not None})
    record(o, "stdio.raw", lambda: [type(sys.stdout.buffer).__name__, type(sys.stderr.buffer).__name__])
    record(o, "locale", lambda: __import__("locale").setlocale(__import__("locale").LC_ALL))
    record(o, "encoding", lambda: [sys.getdefaultencoding(), sys.getfilesystemencoding(), __import__("locale").getpreferredencoding(False)])
    record(o, "cwd", os.getcwd)
    # The process.
    record(o, "signals.handlers", signals)
    record(o, "signals.blocked", lambda: sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    record(o, "signals.status", lambda: [status_field("SigBlk"), status_field("SigIgn")])
    record(o, "rlimits", rlimits)
    record(o, "umask", lambda: (lambda m: (os.umask(m), m)[1])(os.umask(0)))
    record(o, "nice", lambda: os.nice(0))
    record(o, "sched.policy", lambda: os.sched_getscheduler(0))
    record(o, "cpu.affinity", lambda: sorted(os.sched_getaffinity(0)))
    record(o, "proc.session_leader", lambda: os.getsid(0) == os.getpid())
    record(o, "proc.group_leader", lambda: os.getpgrp() == os.getpid())
    record(o, "proc.oom_score_adj", lambda: open("/proc/self/oom_score_adj").read().strip())
    record(o, "proc.no_new_privs", lambda: status_field("NoNewPrivs"))
    record(o, "proc.pdeathsig", lambda: prctl(2, pointer=True))  # PR_GET_PDEATHSIG
    record(o, "proc.dumpable", lambda: prctl(3))  # PR_GET_DUMPABLE
    record(o, "proc.timerslack", lambda: prctl(30))  # PR_GET_TIMERSLACK
    record(o, "fds", fds)
    # A pooled worker's interpreter has a thread of gorun's for its first
    # second or so (docs/compatibility.md's allowlist): counted from 3 s in.
    time.sleep(max(0, 3 - (time.monotonic() - _T0)))
    record(o, "threads.python", lambda: [t.name for t in threading.enumerate()])
    record(o, "threads.native", lambda: sorted(open("/proc/self/task/%s/comm" % t).read().strip() for t in os.listdir("/proc/self/task")))
    record(o, "gc.enabled", gc.isenabled)
    record(o, "gc.threshold", gc.get_threshold)
    record(o, "gc.frozen", lambda: gc.get_freeze_count() > 0)
    record(o, "gc.callbacks", lambda: len(gc.callbacks))
    record(o, "gc.debug", gc.get_debug)
    record(o, "faulthandler", lambda: __import__("faulthandler").is_enabled())
    record(o, "warnings.filters", warnings_filters)
    record(o, "warnings.caught", caught_warning)
    record(o, "logging", logging_state)
    record(o, "env.keys", lambda: sorted(os.environ))
    for name in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "LANG", "LC_ALL", "LC_CTYPE", "PATH", "PYTHONPATH",
                 "CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "NCCL_NVLS_ENABLE"):
        record(o, "env." + name, lambda n=name: os.environ.get(n))
    record(o, "env.proc_matches", lambda: sorted(k.decode() for k in (e.split(b"=", 1)[0] for e in open("/proc/self/environ", "rb").read().split(b"\0") if e)) == sorted(os.environ))
    # torch.
    record(o, "torch.threads", torch.get_num_threads)
    record(o, "torch.interop_threads", torch.get_num_interop_threads)
    record(o, "torch.default_dtype", lambda: str(torch.get_default_dtype()))
    record(o, "torch.grad_enabled", torch.is_grad_enabled)
    record(o, "torch.deterministic", torch.are_deterministic_algorithms_enabled)
    record(o, "torch.sharing_strategy", torch.multiprocessing.get_sharing_strategy)
    record(o, "torch.cuda_available", torch.cuda.is_available)
    if torch.cuda.is_available():
        gpu = LOCAL_RANK % torch.cuda.device_count()
        record(o, "torch.cuda_initial_seed~rank", lambda: (torch.cuda.set_device(gpu), torch.cuda.initial_seed())[1])
        record(o, "torch.cuda_rand~rank", lambda: torch.rand(2, device="cuda").tolist())
    record(o, "torch.compile", compiled)
    record(o, "mp.start_method", lambda: __import__("multiprocessing").get_start_method(allow_none=True))
    record(o, "dataloader.fork", lambda: loaders("fork", 2))
    if LOCAL_RANK == 0:
        record(o, "dataloader.spawn", lambda: loaders("spawn", 1))
        record(o, "dataloader.forkserver", lambda: loaders("forkserver", 1))
    record(o, "traceback", tracebacks)
    record(o, "collective", collective)
    record(o, "atexit.count", lambda: atexit._ncallbacks() if hasattr(atexit, "_ncallbacks") else None)
    with open(os.path.join(OUT, "rank%s.json" % RANK), "w") as f:
        json.dump(o, f, indent=1, sort_keys=True, default=repr)


if __name__ == "__main__":
    main()
