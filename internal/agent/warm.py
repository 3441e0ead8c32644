# The warm start of a Python program, run by gorun's node agent in the
# program's own interpreter ahead of it. It imports the modules named,
# waits on fd 3 for the program itself (one JSON line: environment,
# working directory, arguments), and then becomes it, with sys.argv,
# sys.path[0] and the environment as `python SCRIPT ARGS` or
# `python -m MODULE ARGS` would have set them, the script running as
# __main__. It prints nothing of its own. Two uses:
#
#   warm.py script|module TARGET MODULES...   a warm torchrun
#       (sshexec.Job.Preimport); fd 3 is a pipe.
#   warm.py pool SETTINGS                     the fork server of a worker
#       pool (sshexec.Job.Pool): SETTINGS is JSON (cpus, signals, modules,
#       slots). fd 3 is a unix socket to the agent, on which it first
#       sends its environment as it started (one JSON line). It imports
#       the modules once, forks one interpreter per slot (the slot's own
#       unix socket is fd 4 + its index), sends their pids (a JSON list)
#       and exits; the agent, a child subreaper, becomes their parent.
#       On its socket, now its fd 3, each slot's interpreter waits for
#       the job's line, which brings the worker's stdin, stdout and
#       stderr and names its script.
#   warm.py scan SETTINGS                     what the pool's fork server
#       reads of the workers' script before it imports (_scan), as JSON:
#       for sshexec's tests.
#   warm.py main SETTINGS                     torchrun itself and the fork
#       server of its workers' pool in one interpreter (sshexec.Job.Pool,
#       where the two share their import-time environment): SETTINGS and
#       the fds as for pool, and SETTINGS' "main" names the program. It
#       imports the modules once, with the program's own environment and
#       streams; a fork of it then forks the slots, as pool does, and the
#       interpreter runs the program, the modules already imported. With
#       "pipe" in "main", a warm torchrun as script mode's, whose job line
#       comes on that fd.
#
# A worker run here must observe what it would have cold (README, "What a
# pooled worker guarantees"; examples/fidelity checks it against torchrun).
# The names a fresh interpreter's __main__ starts with (this file runs as
# one): a worker's __main__ starts with the same, in the same order.
_FRESH_MAIN = list(globals())
import _thread
import array
import builtins
import ctypes
import gc
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import runpy
import select
import signal
import socket
import sys
import time
import types
import warnings
import zipfile

_SHIM = os.path.abspath(__file__)


def _open_fds():
    fds = [int(x) for x in os.listdir("/proc/self/fd")]
    out = set()
    for fd in fds:  # the listing's own fd is closed by now
        try:
            os.fstat(fd)
            out.add(fd)
        except OSError:
            pass
    return out


# What this interpreter was started with beside its streams (the agent's
# sockets and pipe, and what the agent's own parent left open): a cold
# worker is started with its streams alone.
_INHERITED = _open_fds()


def _forget_shim():
    # This file is read: it and its private folder go, and the job does
    # not see the folder on its path.
    del sys.path[0]
    try:
        os.unlink(__file__)
        os.rmdir(os.path.dirname(__file__))
    except OSError:
        pass


# A SIGINT (Ctrl-C, or a stop's) that came while the modules were imported
# ahead: the job gets it as soon as it runs, as it would have in its own
# import, instead of it being lost.
_interrupted = False


def _import(modules):
    global _interrupted
    for name in modules:
        try:
            __import__(name)
        except KeyboardInterrupt:
            _interrupted = True
            return
        except BaseException:  # the job imports it again, and reports the failure as it would
            pass


# What torchrun's main() imports only as it runs: the rendezvous handler
# for its backend (static with --master-addr, c10d with --standalone or
# --rdzv-backend c10d), and the IDNA codec its hostname lookup loads.
# docs/bench/torchrun_profile.py reads this list (PREIMPORT=1).
TORCHRUN_LAZY_MODULES = (
    "torch.distributed.elastic.rendezvous.static_tcp_rendezvous",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous",
    "encodings.idna",
)


def _prepay_torchrun(modules):
    # torchrun (torch 2.x) asks torch.cuda.is_available() as it reads its
    # arguments (LaunchConfig.__post_init__): the CUDA driver's start, 226
    # ms of its 364 ms on an H200 (docs/device/h200-1gpu/restart/
    # torchrun-main-profile.txt). Asked here, while the attempt before
    # runs, the same call is free after the hand-off. It makes no CUDA
    # context (no GPU memory: the teardown check would kill a standby
    # holding any); what it reads (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)
    # are import-time variables, so a job whose values differ starts cold.
    if "torch.distributed.run" not in modules or "torch" not in sys.modules:
        return
    try:
        cuda = sys.modules["torch"].cuda
        cuda.is_available()
        # And, in torch 2.11, the NVML count of the devices (19 ms there:
        # loading libnvidia-ml and its init, which later calls find done).
        cuda.device_count()
    except BaseException:  # torchrun asks again, and reports what it finds
        pass
    for name in TORCHRUN_LAZY_MODULES:
        try:
            importlib.import_module(name)
        except BaseException:  # main() imports it again, and reports what it finds
            pass


def _wait_on_pipe(fd):
    line = b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while not line.endswith(b"\n"):
            chunk = f.read(1 << 16)
            if not chunk:
                break
            line += chunk
    if not line.endswith(b"\n"):
        os._exit(125)  # the agent went away before the job came
    return json.loads(line)


def _wait_on_socket():
    sock = socket.socket(fileno=3)
    line, fds = b"", []
    while not line.endswith(b"\n"):
        msg, anc, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * array.array("i").itemsize))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(data[: len(data) - len(data) % a.itemsize])
                fds.extend(a)
        if not msg:
            break
        line += msg
    sock.close()
    if not line.endswith(b"\n") or len(fds) != 3:
        os._exit(125)  # the agent went away before the job came
    return json.loads(line), fds


def _wait_for(w):
    # Until the server the program connects to first accepts (torchrun's
    # rendezvous store on node 0, opened by that node's torchrun at about
    # this moment), so that the program's own connect succeeds the first
    # time instead of waiting out its client's retry delay. After the
    # limit the program runs anyway.
    if not w:
        return
    deadline = time.monotonic() + w["limit_s"]
    while time.monotonic() < deadline:
        try:
            socket.create_connection((w["host"], int(w["port"])), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.005)


def _fresh_main(**names):
    # __main__ as a fresh interpreter has it before its program runs: the
    # names it starts with, in their order, then names (set by how it runs).
    main = types.ModuleType("__main__")
    fresh = {"__name__": "__main__", "__doc__": None, "__package__": None, "__loader__": importlib.machinery.BuiltinImporter,
             "__spec__": None, "__annotations__": {}, "__builtins__": builtins}
    fresh.update(names)
    d = main.__dict__
    d.clear()
    for k in _FRESH_MAIN:
        if k in fresh:
            d[k] = fresh.pop(k)
    d.update(fresh)
    sys.modules["__main__"] = main
    return main


def _run_script(path, given):
    # As `python script` runs it: a fresh __main__ (no spec, no package,
    # a source loader), the code compiled with the script's absolute
    # name; runpy.run_path would differ in sys.argv[0], __package__ and
    # __loader__. A folder or a zip file holding __main__.py runs as
    # Python runs it: on sys.path first, its __main__ module run by runpy.
    if os.path.isdir(path) or (os.path.isfile(path) and zipfile.is_zipfile(path)):
        sys.path.insert(0, path)
        _fresh_main()
        runpy._run_module_as_main("__main__", alter_argv=False)
        return
    sys.path.insert(0, os.path.dirname(os.path.realpath(given)))
    try:
        with io.open_code(path) as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (sys.executable, path, e.errno, e.strerror))
        sys.exit(2)
    main = _fresh_main(__file__=path, __cached__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)


def _show_as(argv):
    # What ps, pgrep -f and /proc/PID/cmdline and environ show of this
    # process: the worker's own command line and environment, as a cold
    # start's, written in place into the room the agent gave this
    # interpreter (sshexec.poolRoom). argv[0] stays, and so does every
    # string of the environment it started with, byte for byte where it
    # was (a library that kept a pointer from getenv() reads what it
    # read): the worker's variables that differ from those (RANK, the
    # TORCHELASTIC_ ones, ...) take the room variable's place. What does
    # not fit, or a /proc/self/mem that cannot be written, leaves the
    # pool's. Both areas' ends are then moved to what they hold
    # (_set_ends); where the kernel refuses, trailing NULs show as empty
    # strings.
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # arg_start, arg_end, env_start, env_end: fields 48-51 of stat(5)
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
        new_arg_end = None
        with open("/proc/self/mem", "r+b", buffering=0) as m:
            m.seek(arg_start)
            first = m.read(arg_end - arg_start).split(b"\0", 1)[0]
            cmd = b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in argv[1:])
            at = arg_start + len(first) + 1
            if len(cmd) <= arg_end - at:
                m.seek(at)
                m.write(cmd.ljust(arg_end - at, b"\0"))
                new_arg_end = at + len(cmd)
            m.seek(env_start)
            old = m.read(env_end - env_start)
            room = old.find(b"\0GORUN_POOL_ROOM=")
            if room < 0:
                _set_ends(new_arg_end, None)
                return
            room += 1
            final = [k + b"=" + v for k, v in os.environb.items()]
            kept = set(final)
            add = b"".join(e + b"\0" for e in final if e not in set(old[:room].split(b"\0")))
            if len(add) > len(old) - room:
                _set_ends(new_arg_end, None)
                return
            # An entry whose variable the worker has otherwise, or not at
            # all, goes (NULs: no library may rely on one of those, which
            # are not read at import).
            at = 0
            for e in old[:room].split(b"\0"):
                if e and e not in kept:
                    m.seek(env_start + at)
                    m.write(b"\0" * len(e))
                at += len(e) + 1
            m.seek(env_start + room)
            m.write(add.ljust(len(old) - room, b"\0"))
            _set_ends(new_arg_end, env_start + room + len(add))
    except (OSError, ValueError):
        pass


class _MMMap(ctypes.Structure):
    # struct prctl_mm_map (linux/prctl.h)
    _fields_ = [(n, ctypes.c_uint64) for n in ("start_code", "end_code", "start_data", "end_data", "start_brk", "brk",
                                               "start_stack", "arg_start", "arg_end", "env_start", "env_end")] + [
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def _set_ends(arg_end, env_end):
    # The ends of the command line's and the environment's areas, for
    # /proc/PID/cmdline and environ: PR_SET_MM_MAP, which needs no
    # capability (Linux 3.18, CONFIG_CHECKPOINT_RESTORE); else
    # PR_SET_MM_ARG_END and _ENV_END, which need CAP_SYS_RESOURCE.
    if arg_end is None and env_end is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        field = lambda n: int(fields[n - 3])  # stat(5)'s numbering
        libc.sbrk.restype = ctypes.c_void_p
        m = _MMMap(field(26), field(27), field(45), field(46), field(47), libc.sbrk(0) or field(47), field(28),
                   field(48), arg_end or field(49), field(50), env_end or field(51), None, 0, 0xFFFFFFFF)
        if libc.prctl(35, 14, ctypes.byref(m), ctypes.sizeof(m), 0) == 0:  # PR_SET_MM, PR_SET_MM_MAP
            return
        for option, end in ((9, arg_end), (11, env_end)):  # PR_SET_MM_ARG_END, PR_SET_MM_ENV_END
            if end is not None:
                libc.prctl(35, option, ctypes.c_ulong(end), 0, 0)
    except Exception:
        pass


def _become(job, mode, target, then):
    os.environ.clear()
    for kv in job["env"]:
        name, _, value = kv.partition("=")
        os.environ[name] = value
    if _COERCED and "LC_CTYPE" not in os.environ and "LC_ALL" not in os.environ:
        os.environ["LC_CTYPE"] = _COERCED  # as Python sets it where it coerces the C locale
    if job.get("shown"):
        _show_as(job["shown"])
        sys.orig_argv = list(job["shown"])
    if then is not None:
        then()
    if job.get("dir"):
        os.chdir(job["dir"])
    sys.argv = [target] + (job.get("args") or [])
    if mode == "script":
        # Python 3.9 and later give __main__ an absolute __file__.
        _run_script(os.path.abspath(target), target)
    else:
        sys.path.insert(0, os.getcwd())
        # Imported ahead, it runs afresh as __main__, as under `python -m`
        # (where sys.modules never has it), without runpy's warning that
        # it was found imported.
        sys.modules.pop(target, None)
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            sys.stderr.write("%s: No module named %s\n" % (sys.executable, target))
            sys.exit(1)
        runpy.run_module(target, run_name="__main__", alter_sys=True)


def _run(job, mode, target, mask=None, then=None):
    # The job runs as this interpreter's program, and ends as one: an
    # exception it raises leaves this file's top level, so Python itself
    # prints it, runs the atexit handlers and exits with 1, or, for a
    # KeyboardInterrupt, dies by SIGINT once finalised. Only the
    # traceback's first frames, this shim's and runpy's, go: it starts at
    # the job's own frame (none for a SyntaxError in the script, whose
    # message Python then prints as its own). mask: the signal mask to
    # restore first (a pooled interpreter holds SIGINT from its fork until
    # here, so that one sent meanwhile ends the worker as a
    # KeyboardInterrupt would at its start, instead of the shim). then:
    # called once the process shows as the job (_become).
    try:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if _interrupted:
            raise KeyboardInterrupt
        _become(job, mode, target, then)
    except SystemExit:
        raise
    except BaseException:
        hook = sys.excepthook  # the job's, if it set one

        def once(kind, value, tb):
            sys.excepthook = hook
            while tb is not None and tb.tb_frame.f_code.co_filename in (_SHIM, runpy.__file__, "<frozen runpy>"):
                tb = tb.tb_next
            value.__traceback__ = tb  # what Python's hook prints
            hook(kind, value, tb)

        sys.excepthook = once
        raise


def _coerced_again():
    # Python coerced this interpreter's C locale as it started (LC_CTYPE,
    # set in its environment) and so runs in UTF-8 mode, where a worker
    # started by torchrun (its environment has torchrun's coerced
    # LC_CTYPE) does not: the interpreter starts again, once, with the
    # coerced LC_CTYPE (sshexec.coercedLocale), before it reads anything.
    # Only the program's side of warm.py main runs as it would have with
    # the C locale: its environment loses the variable again (_become).
    global _COERCED
    if sys.argv[1] not in ("pool", "main"):
        return
    settings = json.loads(sys.argv[2])
    if settings.get("coerced"):
        _COERCED = os.environ.get("LC_CTYPE")
        return
    if not settings.get("coerce") or not sys.flags.utf8_mode or not os.environ.get("LC_CTYPE"):
        return
    settings["coerced"] = True
    argv = list(sys.orig_argv)
    argv[argv.index(sys.argv[2])] = json.dumps(settings)
    os.execv(sys.executable, argv)


# The LC_CTYPE Python coerced the C locale to, where the interpreter
# started again with it (_coerced_again).
_COERCED = None


def _main():
    mode = sys.argv[1]
    _coerced_again()
    _forget_shim()
    if mode == "main":
        _main_and_pool(json.loads(sys.argv[2]))
        return
    if mode == "scan":  # what _scan reads of a script, for sshexec's tests
        sys.stdout.write(json.dumps({k: v for k, v in _scan(json.loads(sys.argv[2])).items() if k != "rules"}) + "\n")
        return
    if mode != "pool":
        target, modules = sys.argv[2], sys.argv[3:]
        _import(modules)
        _prepay_torchrun(modules)
        _run_afresh(modules)
        _run(_handed(3), mode, target)
        return
    _pool(json.loads(sys.argv[2]))


def _run_afresh(modules):
    # A module (not a package) imported ahead runs afresh when the program
    # imports or runs it, its own imports done: a wrapper that runs
    # torchrun's module with runpy, as `python -m` does, gets no warning
    # that it was found imported.
    for name in modules:
        if not hasattr(sys.modules.get(name), "__path__"):
            sys.modules.pop(name, None)


def _handed(fd):
    # A warm program's job, once it comes on fd, and once the server it
    # connects to first accepts.
    job = _wait_on_pipe(fd)
    _wait_for(job.get("wait_for"))
    return job


def _started(settings):
    global _SCAN
    os.environ.pop("GORUN_POOL_ROOM", None)  # room for the worker's own (_show_as), no variable of its
    # The environment as this interpreter has it once started (Python
    # may have set LC_CTYPE, coercing a C locale), which a worker's must
    # match; and what the workers' script does before its imports.
    _SCAN = _scan(settings)
    said = {"env": ["%s=%s" % kv for kv in os.environ.items()], "script": {k: _SCAN.get(k) for k in ("target", "module", "cold", "learned")}}
    _send(3, json.dumps(said).encode() + b"\n")


# What a script does before its imports (README, "What a pooled worker
# guarantees"). A pooled worker's interpreter imported the pool's modules
# (torch) before its script ran: whatever the script does first that a
# cold worker's import of torch would have seen, it does too late. Read
# before the pool imports (_scan), such a script's workers start cold,
# and the fork server says why with its environment. What cannot be read
# ahead (a variable set by a module the script imports first, or through
# code it builds) a pooled worker sees as it happens (_watch): it says so,
# and records it for the script (its path and bytes), so that the next
# attempt's workers, and those of later runs, start cold.
_SCAN = {}
_ENV_WRITES = {"os.putenv", "os.unsetenv", "os.environ.__setitem__", "os.environ.__delitem__", "os.environ.setdefault",
               "os.environ.pop", "os.environ.update", "os.environ.clear", "os.environ.popitem", "os.environ.__ior__"}
_STATE_CHANGES = {
    "sys.path.insert": "changes sys.path", "sys.path.append": "changes sys.path", "sys.path.extend": "changes sys.path",
    "sys.path.remove": "changes sys.path", "sys.path.pop": "changes sys.path", "sys.path.clear": "changes sys.path",
    "sys.path.__setitem__": "changes sys.path", "sys.path.__iadd__": "changes sys.path", "site.addsitedir": "changes sys.path",
    "sys.meta_path.insert": "changes the import system", "sys.meta_path.append": "changes the import system",
    "sys.path_hooks.insert": "changes the import system", "sys.path_hooks.append": "changes the import system",
    "sys.modules.__setitem__": "changes the import system", "sys.modules.update": "changes the import system",
    "sys.modules.pop": "changes the import system", "sys.setdlopenflags": "changes how libraries load (sys.setdlopenflags)",
    "ctypes.CDLL": "loads a library (ctypes)", "ctypes.PyDLL": "loads a library (ctypes)",
    "ctypes.cdll.LoadLibrary": "loads a library (ctypes)", "ctypes.pydll.LoadLibrary": "loads a library (ctypes)",
    "warnings.simplefilter": "sets warnings filters", "warnings.filterwarnings": "sets warnings filters",
    "warnings.resetwarnings": "sets warnings filters", "atexit.register": "registers an atexit handler",
    "exec": "runs code it builds (exec)", "eval": "runs code it builds (eval)", "runpy.run_path": "runs another script",
    "runpy.run_module": "runs another module",
}
_FIXES = {
    "sets warnings filters": "the filters torch installs as it is imported would come first",
    "registers an atexit handler": "torch's own would run after it instead of before",
}


def _scan(settings):
    sc = settings.get("script") or {}
    out = {"target": sc.get("target", ""), "module": bool(sc.get("module")), "rules": settings.get("import_time") or {}}
    modules = settings.get("modules") or []
    if not out["target"] or not modules:
        return out
    try:
        path, source = _script_source(out["target"], out["module"])
    except Exception:
        return out  # the worker fails to find it as it would cold
    out["file"], out["modules_said"] = path, " and ".join(modules)
    out["learned"] = _learned_file(path, source)
    if os.path.exists(out["learned"]):
        out["skip"] = True
        return out  # the agent reads it (scriptVerdict.cold)
    try:
        import ast

        tree = ast.parse(source, path)
    except Exception:
        return out  # a SyntaxError: the worker reports it as Python would
    w = _Walker(tree, modules, out["rules"])
    try:
        w.body(tree.body, True)
    except Exception:  # when in doubt, cold
        w.found = (w.top, "does what gorun could not read ahead", None)
    out["stop"] = w.stop
    if w.found:
        line, what, name = w.found
        why = "%s:%d %s before it imports %s" % (out["target"], line, what, " and ".join(modules))
        if name:
            why += ", which reads it as it is imported: set it in the launch environment or with --env %s=... to keep the pool" % name
        elif what in _FIXES:
            why += ": %s" % _FIXES[what]
        out["cold"], out["skip"] = why, True
    return out


def _script_source(target, module):
    # The file a cold `python [-m] TARGET` would run, read without
    # importing anything of it.
    if module:
        import importlib.machinery as m

        spec, search = None, [os.getcwd()] + sys.path
        for part in target.split("."):
            spec = m.PathFinder.find_spec(part, search)
            if spec is None:
                raise ImportError(target)
            search = spec.submodule_search_locations or []
        if spec.submodule_search_locations:  # a package runs its __main__
            spec = m.PathFinder.find_spec("__main__", spec.submodule_search_locations)
        path = spec.origin
    else:
        path = os.path.abspath(target)
        if os.path.isdir(path):
            path = os.path.join(path, "__main__.py")
        elif zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                return os.path.join(path, "__main__.py"), z.read("__main__.py")
    with io.open_code(path) as f:
        return path, f.read()


def _learned_file(path, source):
    import hashlib

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(path.encode("utf-8", "surrogateescape") + b"\0" + source).hexdigest()[:32]
    return os.path.join(cache, "gorun", "cold", key)


def _import_time(name, rules):
    return name.startswith(tuple(rules.get("prefixes") or ())) or name in (rules.get("names") or ())


class _Walker:
    # Walks a script's module-level statements in the order they run
    # (every branch, the body of each function they call, the body of
    # each class they define), up to the statement after which every
    # module of the pool is imported (stop, a module-level line), and
    # notes the first that does what a pooled interpreter would not see.

    def __init__(self, tree, modules, rules):
        import ast

        self.ast = ast
        self.modules, self.rules = modules, rules
        self.funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.alias, self.imported, self.called = {}, set(), set()
        self.found, self.stop, self.top, self.quiet_warnings = None, 0, 0, 0

    def done(self):
        return all(any(i == m or i.startswith(m + ".") or m.startswith(i + ".") for i in self.imported) for m in self.modules)

    def body(self, stmts, top):
        for st in stmts:
            if top:
                self.top = st.lineno
            self.stmt(st)
            if self.found or self.stop:
                return

    def note(self, node, what, name=None):
        if not self.found:
            self.found = (getattr(node, "lineno", self.top), what, name)

    def imports(self, name):
        self.imported.add(name)
        if not self.stop and self.done():
            self.stop = self.top

    def stmt(self, st):
        ast = self.ast
        if isinstance(st, ast.Import):
            for a in st.names:
                self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                self.imports(a.name)
        elif isinstance(st, ast.ImportFrom):
            if st.level == 0 and st.module:
                for a in st.names:
                    self.alias[a.asname or a.name] = st.module + "." + a.name
                self.imports(st.module)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in st.decorator_list:
                if self.dotted(d) == "atexit.register":
                    self.note(d, _STATE_CHANGES["atexit.register"])
                self.expr(d)
            if isinstance(st, ast.ClassDef):
                for b in st.bases:
                    self.expr(b)
                self.body(st.body, False)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            quiet = any(self.dotted(getattr(i.context_expr, "func", None)) == "warnings.catch_warnings" for i in st.items)
            for i in st.items:
                self.expr(i.context_expr)
            self.quiet_warnings += quiet
            self.body(st.body, False)
            self.quiet_warnings -= quiet
        elif isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = st.targets if isinstance(st, (ast.Assign, ast.Delete)) else [st.target]
            for t in targets:
                self.target(t, isinstance(st, ast.AugAssign))
            if getattr(st, "value", None) is not None:
                self.expr(st.value)
        else:
            for field in ("test", "iter", "subject", "value", "exc", "msg"):
                if getattr(st, field, None) is not None:
                    self.expr(getattr(st, field))
            for field in ("body", "orelse", "finalbody"):
                self.body(getattr(st, field, None) or [], False)
            for h in getattr(st, "handlers", None) or []:
                self.body(h.body, False)
            for c in getattr(st, "cases", None) or []:
                self.body(c.body, False)

    def target(self, t, augmented):
        ast = self.ast
        if isinstance(t, ast.Subscript):
            base = self.dotted(t.value)
            if base == "os.environ":
                self.env(t, self.const(t.slice))
            elif base in ("sys.path", "sys.modules", "sys.meta_path", "sys.path_hooks"):
                self.note(t, "changes " + base if base == "sys.path" else "changes the import system")
        elif isinstance(t, (ast.Attribute, ast.Name)):
            name = self.dotted(t)
            if name == "os.environ":
                self.note(t, "replaces os.environ")
            elif name in ("sys.path", "sys.meta_path", "sys.path_hooks", "sys.modules"):
                self.note(t, "changes sys.path" if name == "sys.path" else "changes the import system")
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e, augmented)

    def expr(self, node):
        ast = self.ast
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                self.call(n)

    def call(self, c):
        name = self.dotted(c.func)
        if name is None:
            return
        if name in _ENV_WRITES:
            if name.endswith(("update", "__ior__")):
                arg = c.args[0] if c.args else None
                if isinstance(arg, self.ast.Dict) and all(self.const(k) is not None for k in arg.keys):
                    for k in arg.keys:
                        self.env(c, self.const(k))
                elif arg is not None:
                    self.env(c, None)
                for kw in c.keywords:
                    self.env(c, kw.arg)
            elif name.endswith(("clear", "popitem")):
                self.env(c, None)
            else:
                self.env(c, self.const(c.args[0]) if c.args else None)
        elif name in _STATE_CHANGES:
            if not (name.startswith("warnings.") and self.quiet_warnings):
                self.note(c, _STATE_CHANGES[name])
        elif name in ("importlib.import_module", "__import__") and c.args and self.const(c.args[0]):
            self.imports(self.const(c.args[0]))
        elif name in self.funcs and name not in self.called:
            self.called.add(name)
            self.body(self.funcs[name].body, False)

    def env(self, node, key):
        if key is None:
            self.note(node, "sets an environment variable it names as it runs")
        elif _import_time(key, self.rules):
            self.note(node, "sets %s" % key, key)

    def const(self, node):
        if isinstance(node, self.ast.Constant) and isinstance(node.value, str):
            return node.value
        return None

    def dotted(self, node):
        ast = self.ast
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return base + "." + node.attr if base else None
        return None


def _watch(env):
    # The pooled worker's own check (see _SCAN): an audit hook that sees
    # every change of a variable read at import, made while its script's
    # top level has not yet reached the line after which it has imported
    # the pool's modules. The first is said on the worker's stderr once
    # for the script (the file records it; the rank that makes the file
    # says it), the variable named, never its value.
    scan = _SCAN
    path, marker, stop, rules = scan.get("file"), scan.get("learned"), scan.get("stop") or 0, scan.get("rules") or {}
    if not path or not marker:
        return
    said = []

    def hook(event, args):
        if event != "os.putenv" and event != "os.unsetenv" or said:
            return
        name = args[0].decode("utf-8", "surrogateescape") if isinstance(args[0], bytes) else args[0]
        if not _import_time(name, rules):
            return
        value = None
        if event == "os.putenv":
            value = args[1].decode("utf-8", "surrogateescape") if isinstance(args[1], bytes) else args[1]
        if value == env.get(name):
            return
        f, setter, top = sys._getframe(1), None, None
        while f is not None:
            code = f.f_code
            if setter is None and code.co_filename not in (os.__file__, "<frozen os>"):
                setter = "%s:%d" % (code.co_filename, f.f_lineno)
            if code.co_filename == path and code.co_name == "<module>":
                top = f.f_lineno
            f = f.f_back
        if top is None or (stop and top > stop):
            return
        said.append(True)
        where = setter if setter == "%s:%d" % (path, top) else "%s (from %s:%d)" % (setter, path, top)
        what = "set %s at %s before its script imported %s, which reads it as it is imported" % (name, where, scan.get("modules_said", "the pool's modules"))
        try:
            os.makedirs(os.path.dirname(marker), 0o700, exist_ok=True)
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            return  # said already, by another rank or run
        os.write(fd, what.encode("utf-8", "surrogateescape") + b"\n")
        os.close(fd)
        msg = ("gorun: this worker's interpreter (the worker pool) imported its modules before its script ran: it %s, "
               "so it runs with the value it was imported with. The next attempt's workers, and those of later runs of "
               "this script, start cold; to keep the pool, set %s in the launch environment or with --env.\n" % (what, name))
        try:
            os.write(2, msg.encode("utf-8", "surrogateescape"))
        except OSError:
            pass

    sys.addaudithook(hook)


def _hold():
    # What the imports print belongs to every worker: held until their
    # streams come.
    held = {1: os.memfd_create("gorun-held-out"), 2: os.memfd_create("gorun-held-err")}
    for fd, h in held.items():
        os.dup2(h, fd)
    return held


def _replay(held):
    for fd, h in held.items():
        at = 0
        while True:
            b = os.pread(h, 1 << 16, at)
            if not b:
                break
            at += len(b)
            _send(fd, b)
        os.close(h)


def _worker_signals(settings):
    # The agent ignores the signals it passes on; a worker has them as
    # Python would at its start.
    for n in settings.get("signals") or []:
        signal.signal(n, signal.default_int_handler if n == signal.SIGINT else signal.SIG_DFL)


def _pool(settings):
    _started(settings)
    if _SCAN.get("skip"):
        # Its workers start cold (the script, read, says so): nothing to
        # import for them, or to take the CPUs their own imports need.
        _send(3, b"[]\n")
        os._exit(0)
    _worker_signals(settings)
    if settings.get("cpus"):
        os.sched_setaffinity(0, settings["cpus"])  # before OpenMP reads it, at import
    held = _hold()
    _import(settings.get("modules") or [])
    _imported()
    _fork_slots(settings, os.getppid(), held)


def _main_and_pool(settings):
    # The program (torchrun) imports the modules its workers' slots need,
    # once for all: with its own environment, signal dispositions and CPUs
    # (the agent checked that the slots' import-time environment is the
    # same, but for PYTHONFAULTHANDLER, and that their CPUs cannot size a
    # library's threads: OMP_NUM_THREADS is set, or they are unbound).
    _started(settings)
    own = {1: os.dup(1), 2: os.dup(2)}
    held = _hold()
    _import(settings.get("modules") or [])
    _imported()
    for f in (sys.stdout, sys.stderr):  # what Python holds goes where the held bytes go, once
        try:
            f.flush()
        except Exception:
            pass
    server = 0
    if _SCAN.get("skip"):
        _send(3, b"[]\n")  # its workers start cold (the script, read, says so): no slot is forked
    else:
        # The imported objects stay shared with the fork: no collection in
        # the program touches them (each would copy the pages it walks).
        gc.freeze()
        agent = os.getppid()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fork with threads about: the forked one runs alone
            server = os.fork()
    if server == 0 and not _SCAN.get("skip"):
        for fd in own.values():
            os.close(fd)
        _worker_signals(settings)
        _as_python_u()
        _fork_slots(settings, agent, held)
    if settings.get("faulthandler"):
        # Started with PYTHONFAULTHANDLER for its slots (sshexec's
        # startServer): the program runs as it would have without it.
        import faulthandler

        faulthandler.disable()
        os.environ.pop("PYTHONFAULTHANDLER", None)
    for fd in range(3, 4 + len(settings.get("slots") or [])):
        os.close(fd)  # the slots' sockets and the agent's, theirs now
    for fd, o in own.items():
        os.dup2(o, fd)
        os.close(o)
    _replay(held)  # what the imports printed, as the program's own start would have
    main, modules = settings["main"], settings.get("modules") or []
    if main.get("pipe"):  # a standby: as script mode, with the slots forked
        pre = main.get("preimport") or []
        _import(pre)
        _prepay_torchrun(pre)
        modules = modules + pre
    _run_afresh(modules)
    if server:
        os.waitpid(server, 0)  # it has forked the slots, beside what this one did since
    if main.get("pipe"):
        job = _handed(main["pipe"])
    else:
        job = {"env": ["%s=%s" % kv for kv in os.environ.items()], "args": main.get("args") or [], "shown": main.get("shown")}
    _run(job, main["mode"], main["target"])


def _as_python_u():
    # The slots' interpreters write as `python -u` does, as a pool's own
    # (started with -u, as `gorun _rank` starts a worker) would: stdout
    # and stderr unbuffered, through to their fds.
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        if old is None:
            continue
        raw = io.FileIO(fd, "wb", closefd=False)
        raw.name = "<%s>" % name
        new = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, newline="\n", write_through=True)
        new.mode = "w"
        setattr(sys, name, new)
        setattr(sys, "__%s__" % name, new)


def _fork_slots(settings, agent, held):
    # The fork server's part once the modules are imported: it forks each
    # slot's interpreter, sends their pids to the agent, and exits.
    slots = settings.get("slots") or []
    libc = ctypes.CDLL(None, use_errno=True)
    gc.freeze()  # the imported objects stay shared with the forks: no collection touches them
    me = os.getpid()
    ready_r, ready_w = os.pipe()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pids = []
    for i, slot in enumerate(slots):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fork with threads about: the forked one runs alone
            pid = os.fork()
        if pid == 0:
            # The worker: it ends as its script does, through the
            # interpreter's own exit (atexit handlers, flushes).
            _slot(i, len(slots), slot, agent, me, libc, ready_r, ready_w, held, mask)
            sys.exit(0)
        pids.append(pid)
    os.close(ready_w)
    # Each slot's interpreter is in a session of its own before its pid
    # is known: a signal to its group finds it.
    n = 0
    while n < len(pids):
        b = os.read(ready_r, 64)
        if not b:
            break
        n += len(b)
    _send(3, json.dumps(pids).encode() + b"\n")
    os._exit(0)


def _own_pages():
    # A forked interpreter shares its pages with the server's other forks
    # until it writes one; the worker's first environment, parse and
    # compile would copy thousands of them (the allocator's pools the
    # imports left half full) after its take came: 7.5 ms against 2.2 with
    # this done first (docs/bench/pool_pages.py, idle CPUs; more on busy
    # ones), for 3 MB more of the slot's own memory. Done now, while the
    # slot waits, by the same work on something else. Nothing of it shows:
    # the take replaces the environment, and the code never runs.
    try:
        with io.open_code(os.__file__) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what it would print goes to the worker's streams (held)
            compile(f.read(), os.__file__, "exec", dont_inherit=True)
    except Exception:  # no source at hand (a zipped or frozen standard library): the worker pays it
        pass
    json.loads(json.dumps({"env": ["GORUN_POOL_WARM=%d" % i for i in range(64)], "args": []}))
    os.environ["GORUN_POOL_WARM"] = "1"
    del os.environ["GORUN_POOL_WARM"]


def _send(fd, b):
    while b:
        b = b[os.write(fd, b):]


def _slot(i, n, slot, agent, server, libc, ready_r, ready_w, held, mask):
    shared = _private_ranges()
    os.close(ready_r)
    # A group of its own, as `gorun _rank` starts a cold worker: a signal
    # to its group finds it before its pid is known.
    os.setpgid(0, 0)
    os.dup2(4 + i, 3)  # its own socket, in the server's
    for fd in range(4, 4 + n):
        os.close(fd)
    if slot.get("cpus"):
        os.sched_setaffinity(0, slot["cpus"])
    os.write(ready_w, b".")
    os.close(ready_w)
    # The server exits once every slot is forked, and the agent, a child
    # subreaper, becomes the parent; nothing of it may outlive the agent.
    while os.getppid() == server:
        time.sleep(0.0002)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != agent:
        os._exit(125)  # the agent is gone
    if not select.select([3], [], [], 0)[0]:  # a worker already waiting would only wait longer
        _own_pages()
    job, fds = _wait_on_socket()
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    _replay(held)
    _as_cold()
    # SIGINT still held as it starts: never delivered there.
    def started():
        # The thread is running before the script is: one still starting
        # as a short script's interpreter finalizes writes to a thread
        # state the finalization freed (a pooled worker then died by
        # SIGSEGV instead of its exit code, 3 times in 30 here).
        running = _thread.allocate_lock()
        running.acquire()
        _thread.start_new_thread(_own_later, (libc, _OWN_LATER_S, shared, running))
        running.acquire()
        _watch(dict(os.environ))

    _run(job, job["mode"], job["target"], mask, started)


# Whether the imports themselves left objects frozen in the collector (a
# library may call gc.freeze() as it loads): a worker's collector is then
# as they left it, the rest of what the pool froze given back.
_IMPORT_FROZE = False


def _imported():
    global _IMPORT_FROZE
    _IMPORT_FROZE = gc.get_freeze_count() > 0


def _as_cold():
    # What a fork copied of the fork server that a cold worker would have
    # of its own. Its fds: none but its streams, as a cold start's
    # (close_fds); what the imports opened stays, as it would cold. Its
    # collector's state: as the imports left it. Its random state: what a fresh
    # interpreter draws from the OS as it imports, torch's default (CPU)
    # generator and numpy's legacy global one, drawn again (Python's
    # random draws again after a fork by itself; hash() randomisation
    # cannot be, README's allowlist says so).
    for fd in _INHERITED:
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    os.close(fd)
            except OSError:
                pass
    if not _IMPORT_FROZE:
        gc.unfreeze()
    torch = sys.modules.get("torch")
    gen = getattr(torch, "default_generator", None)
    if gen is not None:
        try:
            gen.seed()
        except Exception:
            pass
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None and hasattr(nprandom, "seed"):
        try:
            nprandom.seed()
        except Exception:
            pass


# A pooled worker shares the pages of its fork server's import with the
# interpreters forked beside it (and with torchrun, where that is the
# server) until one of them writes a page, which is then copied. Its
# interpreter's exit writes nearly all (its modules' teardown): a worker
# that raised took 0.5 s from its traceback to its end against 0.2 s
# cold (docs/bench/results/pooled-worker-end-2026-12-06.txt), and a
# run's end came 0.8 s later (1.3 s against torchrun's 0.5). So a thread
# of the worker's own, _OWN_LATER_S after its start, makes every page it
# still shares its own, without changing a byte (MADV_POPULATE_WRITE,
# Linux 5.14; elsewhere nothing happens): it then holds what a cold
# start would have held, and ends as fast. Only anonymous pages present
# and shared are touched (pagemap), so no untouched memory is filled in
# and no file's page copied, and only in the mappings there were at the
# fork (_private_ranges), so that it walks the import's memory, not what
# the worker maps later. The thread is no threading.Thread (not in
# threading.enumerate()) and ends once done.
_OWN_LATER_S = 1.0
_MADV_POPULATE_WRITE = 23


def _private_ranges():
    # The private writable mappings: where this interpreter can share
    # pages with those forked beside it (read as it is forked, so that the
    # worker's own later mappings, CUDA's reservations, are never walked).
    ranges = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 1 and fields[1] == "rw-p":
                    lo, hi = fields[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return ranges


def _has_children():
    try:
        for task in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % task) as f:
                if f.read().strip():
                    return True
    except OSError:
        pass
    return False


def _own_later(libc, delay, ranges, running):
    running.release()
    time.sleep(delay)
    if _has_children():
        # Forked already (DataLoader workers): they share these pages too,
        # and copies made here would be on top of theirs, as a cold
        # worker's would not be. The exit pays the copies instead.
        return
    try:
        madvise = libc.madvise
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        page = os.sysconf("SC_PAGE_SIZE")
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
        try:
            for lo, hi in ranges:
                step = 1 << 15  # pages a read
                for at in range(lo, hi, step * page):
                    n = (min(hi, at + step * page) - at) // page
                    # Each entry's top byte (little-endian: its 8th) holds
                    # the flags, read at C speed so that the walk holds
                    # the GIL as little as the script would notice.
                    flags = os.pread(fd, 8 * n, at // page * 8)[7::8].translate(_SHARED)
                    for run in _RUN.finditer(flags):
                        start, end = run.span()
                        if madvise(at + start * page, (end - start) * page, _MADV_POPULATE_WRITE) != 0:
                            return  # not on this kernel
        finally:
            os.close(fd)
    except Exception:  # a mapping that went meanwhile, no pagemap: the exit pays the copies
        pass


# A page to own: present (bit 63), not mapped here alone (56), and not a
# file's page (61: a library's data only read, the page cache's, which a
# cold start shares too). Bits 56-63 are the entry's top byte.
_SHARED = bytes(ord("s") if f & 0xA1 == 0x80 else ord(".") for f in range(256))
_RUN = re.compile(b"s+")


_main()
