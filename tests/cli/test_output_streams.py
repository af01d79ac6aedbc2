"""With stdout a pipe (CI, nohup, a notebook), a command's results go to stdout and nothing else does; its
status and progress go to stderr, as plain lines (no carriage-return bar) when stderr is not a terminal."""

import io
import json
import subprocess
import sys

from blocklab.training.logger import PlainProgress, progress_bar
from tests.helpers import as_args


def blocklab(*args):
    return subprocess.run(
        [sys.executable, "-m", "blocklab", *map(str, args)], capture_output=True, text=True, timeout=600
    )


def test_train_results_on_stdout_status_and_progress_on_stderr(tmp_path, overrides):
    p = blocklab("train", "--out", tmp_path / "run", *as_args(overrides))
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert len(out) == 1 and json.loads(out[0])["status"] == "completed"  # the summary, and nothing else
    err = p.stderr
    assert "\r" not in err
    steps = [line for line in err.splitlines() if line.startswith("step ")]
    assert steps and steps[-1].startswith("step 20/20 (100%) loss=")  # a plain line at least at the end
    assert "data:" in err  # the data pipeline's status


def test_no_progress_means_no_progress_lines(tmp_path, overrides):
    p = blocklab("train", "--out", tmp_path / "run", "--no-progress", *as_args(overrides))
    assert p.returncode == 0, p.stderr
    assert not [line for line in p.stderr.splitlines() if line.startswith("step ")]


def test_plain_progress_prints_the_first_and_last_step_and_then_every_interval():
    buf = io.StringIO()
    bar = PlainProgress(total=5, start=0, interval=3600, file=buf)
    for step in range(5):
        bar.set_postfix(loss=f"{5 - step:.3f}", refresh=False)
        bar.update(1)
    bar.close()
    lines = buf.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["step 1/5", "step 5/5"]
    assert "loss=5.000" in lines[0] and "loss=1.000" in lines[1]


def test_progress_is_plain_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(progress_bar(10, 0, None), PlainProgress)
    assert progress_bar(10, 0, False).disable
    assert not isinstance(progress_bar(10, 0, True), PlainProgress)
