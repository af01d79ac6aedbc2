"""A sweep's init probes (`blocklab probe` with the sweep's [probes] options) in a process of their own.

compare starts them when the training ends and writes the report meanwhile: the report needs them only for its
probe section, which it draws last (reporting/report.py), so the probes' measurements and figures and the
report's own figures share the cores instead of taking turns. In the demo each took about 17 s of one core.
The child gets every core but one (at least one): the other is the report's, and OpenMP threads that outnumber
the free cores wait for each other at every operator (training/threads.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from blocklab.errors import UserError
from blocklab.experiments.sweep import Sweep
from blocklab.training.threads import cpu_count

ERROR_PREFIX = "blocklab probe: error: "


def probe_args(sweep: Sweep, out: Path) -> list[str]:
    """`blocklab probe`'s arguments for the sweep's probes into out/probes (the sweep's data when none is named)."""
    args = ["--out", str(out / "probes")]
    for key, value in sweep.probes.items():
        args += [f"--{key}", str(value)]
    if sweep.base.get("data", {}).get("source") and "data" not in sweep.probes:
        args += ["--data", str(sweep.base["data"]["source"])]
    return args


class ProbeJob:
    """The probes' process: `start` it, `wait` for it (its output goes to `log`, a failure is one UserError), and
    `stop` it when the sweep ends otherwise (Ctrl-C, an error): nothing is left running."""

    def __init__(self, args: list[str] | None, log=print):
        self.args = args
        self.log = log
        self._proc: subprocess.Popen | None = None
        self._output = None

    def start(self) -> ProbeJob:
        if self.args is None or self._proc is not None:
            return self
        self.log("init probes: " + " ".join(self.args[2:]))
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, cpu_count() - 1)))
        self._output = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "blocklab", "probe", *self.args, "--no-progress"],
            stdin=subprocess.DEVNULL,
            stdout=self._output,
            stderr=subprocess.STDOUT,
            env=env,
        )
        return self

    def wait(self) -> None:
        """Block until the probes are written; their output, then a UserError if they failed. Waiting again (or
        for a job that never started) returns at once."""
        if self._proc is None or self._output is None:
            return
        code = self._proc.wait()
        self._output.seek(0)
        lines = [line.rstrip("\n") for line in self._output if line.strip()]
        self._output.close()
        self._output = None
        if code == 0:
            for line in lines:
                self.log(line)
            return
        if code in (130, -2):
            raise KeyboardInterrupt
        said = [line.removeprefix(ERROR_PREFIX) for line in lines if line.startswith(ERROR_PREFIX)]
        why = said[-1] if said else (lines[-1] if lines else f"the probe process ended with code {code}")
        raise UserError(f"the init probes failed: {why}")

    def stop(self) -> None:
        """End the process if it still runs (after a Ctrl-C it has had its own SIGINT and saves nothing)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._output is not None:
            self._output.close()
            self._output = None


def stored_options(out: Path) -> dict | None:
    """The options out/probes/probes.json was measured with; None where it has no record of them (written by
    an older blocklab, or by `blocklab probe` called from Python) or cannot be read."""
    try:
        options = json.loads((Path(out) / "probes" / "probes.json").read_text())["settings"]["options"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return options if isinstance(options, dict) else None


def start_probes(sweep: Sweep, out: Path, log=print) -> ProbeJob:
    """The sweep's init probes, started (a job that does nothing when the sweep has none or out/probes already
    holds them: they are kept; runner.check_probes has said whether they are the ones asked for)."""
    wanted = bool(sweep.probes) and not (Path(out) / "probes" / "probes.json").is_file()
    return ProbeJob(probe_args(sweep, Path(out)) if wanted else None, log).start()


def run_probes(sweep: Sweep, out: Path, log=print) -> None:
    """The sweep's init probes, once (kept if already there), waited for."""
    job = start_probes(sweep, out, log)
    try:
        job.wait()
    finally:
        job.stop()
