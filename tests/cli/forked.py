"""Commands run as processes forked from one that has already imported torch and blocklab.

A fresh `python -m blocklab train` spends about 5 CPU seconds importing torch, torch._dynamo and blocklab,
then trains the tests' tiny runs in about one; a test module that starts ten of them spends most of its time
importing. Here one server process per test module does those imports once and never runs a torch op (so
it holds no thread pool: one thread, safe to fork), and each command is a child forked from it that runs
`python -m MODULE ARGS` or `python -c SCRIPT ARGS` from there: its own pid, signals, exit status, stdout and
stderr, and Python's own exit (non-daemon threads joined, atexit handlers, streams flushed), as a process
the user starts, only without the imports. A command that imports something more imports it itself.

Only what reads the environment after the fork sees `env` (the child's own subprocesses do, torch's
thread count does not): a test about the environment a process starts with starts a real one.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

# Imported once by the server: what `blocklab train` and torchrun's launcher import (a command that
# needs more imports it itself). Nothing here runs a torch op.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.distributed.launcher.api",  # what torch.distributed.run imports (runpy runs that module itself)
    "safetensors.torch",
    "tokenizers",
    "blocklab.cli",
    "blocklab.cli.train",
    "blocklab.training",
    "blocklab.training.trainer",
    "blocklab.data",
    "blocklab.model",
    "blocklab.blocks",
)

SERVER = r"""
import atexit, importlib, json, os, runpy, signal, sys, threading, types

for name in sys.argv[1:]:
    importlib.import_module(name)
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else threading.active_count()
assert threads == 1, f"{threads} threads in the fork server"
requests, replies = sys.stdin, sys.stdout


def child(req):
    # As `python -m MODULE ARGS` or `python -c SCRIPT ARGS` would, from here on.
    code = 1
    try:
        write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], write), (2, req["stderr"], write)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.environ.update(req["env"])
        try:
            if req["script"] is not None:
                sys.argv = ["-c", *req["args"]]
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(req["script"], "<string>", "exec"), main.__dict__)
            else:
                sys.argv = [req["module"], *req["args"]]  # runpy puts the module's path in argv[0]
                runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException as e:  # the traceback from the command's first frame, as Python prints it
            sys.excepthook(type(e), e, e.with_traceback(e.__traceback__.tb_next).__traceback__)
            if isinstance(e, KeyboardInterrupt):  # Python's exit on an unhandled Ctrl-C: death by SIGINT
                code = -signal.SIGINT
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        os._exit(code & 0xFF)


replies.write("ready\n")
replies.flush()
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(req)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""


class Child:
    """A forked command, as much of subprocess.Popen as the tests use."""

    def __init__(self, server: Server, pid: int, stdout: Path, stderr: Path):
        self.server, self.pid, self.returncode = server, pid, None
        self._stdout, self._stderr = stdout, stderr

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it has just exited
                os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        if self.returncode is None:
            try:
                self._exited(self.server._reply(timeout)["returncode"])
            except TimeoutError:
                self.kill()
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout) from None
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        if self.returncode is None:
            self._exited(self.server._reply(60)["returncode"])

    def _exited(self, returncode: int) -> None:
        self.returncode, self.server.running = returncode, None

    def communicate(self, timeout: float) -> tuple[str, str]:
        self.wait(timeout)
        return self._stdout.read_text(), self._stderr.read_text()


class Server:
    """One process that imports PRELOAD, then forks a Child per command, one command at a time."""

    def __init__(self, folder: Path):
        self.folder, self.count, self.running = folder, 0, None
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, *PRELOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._line(300) == "ready\n"

    def _line(self, timeout: float) -> str:
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise TimeoutError
        line = self.proc.stdout.readline()
        assert line, f"the fork server died (exit code {self.proc.wait()})"
        return line

    def _reply(self, timeout: float) -> dict:
        return json.loads(self._line(timeout))

    def start(self, args, module: str = "blocklab", script: str | None = None, env: dict | None = None) -> Child:
        """`python -m module *args`, or `python -c script *args` where a script is given."""
        if self.running is not None:  # one left behind by a failed test
            self.running.kill()
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        req = dict(module=module, script=script, args=list(map(str, args)), stdout=str(out), stderr=str(err))
        self.proc.stdin.write(json.dumps(dict(req, env=env or {})) + "\n")
        self.proc.stdin.flush()
        self.running = Child(self, self._reply(60)["pid"], out, err)
        return self.running

    def run(self, args, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
        """As subprocess.run(..., capture_output=True, text=True)."""
        t0 = time.time()
        child = self.start(args, **kw)
        out, err = child.communicate(timeout - (time.time() - t0))
        return subprocess.CompletedProcess(child.pid, child.returncode, out, err)

    def close(self) -> None:
        if self.running is not None:
            self.running.kill()
        self.proc.kill()  # nothing to save: the seconds of a torch interpreter's shutdown are not worth waiting for
        self.proc.wait(60)
        self.proc.stdin.close()
        self.proc.stdout.close()
