# The warm start of a Python job (sshexec.Job.Preimport). gorun's node
# agent runs this ahead of the job, in the job's own interpreter: it
# imports the modules named, waits on fd 3 for the job itself (one JSON
# line: environment, working directory, arguments), and then becomes it,
# with sys.argv, sys.path[0] and the environment as `python SCRIPT ARGS`
# or `python -m MODULE ARGS` would have set them, the script running as
# __main__. It prints nothing of its own.
import json
import os
import runpy
import sys


def _wait_for_job():
    line = b""
    with os.fdopen(3, "rb", buffering=0) as f:
        while not line.endswith(b"\n"):
            chunk = f.read(1 << 16)
            if not chunk:
                break
            line += chunk
    if not line.endswith(b"\n"):
        os._exit(125)  # the agent went away before the job came
    return json.loads(line)


def _main():
    mode, target, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
    # This file is read: it and its private folder go, and the job does
    # not see the folder on its path.
    del sys.path[0]
    try:
        os.unlink(__file__)
        os.rmdir(os.path.dirname(__file__))
    except OSError:
        pass
    for name in modules:
        try:
            __import__(name)
        except BaseException:  # the job imports it again, and reports the failure as it would
            pass
    job = _wait_for_job()
    os.environ.clear()
    for kv in job["env"]:
        name, _, value = kv.partition("=")
        os.environ[name] = value
    if job.get("dir"):
        os.chdir(job["dir"])
    sys.argv = [target] + job["args"]
    if mode == "script":
        sys.path.insert(0, os.path.dirname(os.path.realpath(target)))
        runpy.run_path(target, run_name="__main__")
    else:
        sys.path.insert(0, os.getcwd())
        runpy.run_module(target, run_name="__main__", alter_sys=True)


_main()
