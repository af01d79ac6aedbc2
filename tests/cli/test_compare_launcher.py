"""`compare --launcher ray`'s mistakes, each one line and a non-zero exit before any run starts (without the extra,
an address where no cluster answers, a folder compare cannot write, settings that do not go together), and the
folder's lock that refuses a second compare. The launcher on a real cluster: tests/experiments/test_ray_launcher.py."""

import os
import signal
import socket
import sys
import time

import pytest

from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.experiments import lock
from blocklab.experiments.jobs import on_sigterm
from blocklab.experiments.ray_launcher import NEVER_FOLD, _interrupt
from tests.cli.test_compare_cli import write_sweep


@pytest.fixture
def sweep(tmp_path, overrides, monkeypatch):
    monkeypatch.setattr("blocklab.experiments.jobs.run_many", lambda *a, **k: pytest.fail("a run started"))
    monkeypatch.setattr("blocklab.experiments.ray_launcher.RayLauncher.run", lambda *a, **k: pytest.fail("started"))
    for name in (NEVER_FOLD[0], "RAY_ADDRESS"):  # what compare sets for ray is undone after the test
        monkeypatch.delenv(name, raising=False)
    return write_sweep(tmp_path / "sweep.toml", overrides, steps=6)


def one_line(capsys) -> str:
    """compare's last stderr line, the only one after its status line; no traceback."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "Traceback" not in "".join(err), err
    return err[-1]


def test_without_the_extra_it_is_one_line(sweep, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where the package is not installed
    assert main(["compare", str(sweep), "--out", str(tmp_path / "out"), "--launcher", "ray"]) == 2
    assert (
        one_line(capsys)
        == "blocklab compare: error: compare --launcher ray needs the ray package: pip install 'blocklab[ray]'"
    )
    assert not (tmp_path / "out").exists()


def test_an_address_where_no_cluster_answers_is_one_line(sweep, tmp_path, capsys):
    with socket.socket() as s:  # a port on a loopback alias that nothing listens on
        s.bind(("127.0.0.2", 0))
        address = f"127.0.0.2:{s.getsockname()[1]}"
    assert main(["compare", str(sweep), "--out", str(tmp_path / "out"), "--launcher", "ray", "--ray-address", address])
    line = one_line(capsys)
    assert f"no Ray cluster answers at {address}" in line and "ray start --head" in line, line
    assert not (tmp_path / "out" / "runs").exists()


def test_the_address_comes_from_ray_address_too(sweep, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.2:notaport")
    assert main(["compare", str(sweep), "--out", str(tmp_path / "out"), "--launcher", "ray"]) == 2
    assert "'127.0.0.2:notaport' is not HOST:PORT" in one_line(capsys)


def test_a_folder_compare_cannot_write_is_one_line(sweep, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["compare", str(sweep), "--out", str(tmp_path / "file" / "out"), "--launcher", "ray"]) == 2
    assert "cannot be written (Not a directory): a part of the path is a file" in one_line(capsys)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--launcher", "ray", "--jobs", "2"], "--jobs is the local launcher's"),
        (["--launcher", "ray", "--gpus-per-run", "1.5"], "--gpus-per-run 1.5 is not valid"),
        (["--launcher", "ray", "--cpus-per-run", "0"], "--cpus-per-run 0 is not valid"),
        (["--ray-address", "127.0.0.2:6379"], "--ray-address goes with --launcher ray"),
        (["--gpus-per-run", "0.25"], "--gpus-per-run goes with --launcher ray"),
    ],
)
def test_settings_that_do_not_go_together_are_one_line(sweep, tmp_path, capsys, args, words):
    assert main(["compare", str(sweep), "--out", str(tmp_path / "out"), *args]) == 2
    assert words in one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_second_compare_on_the_same_folder_is_refused_in_one_line(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    held = lock._take(out / lock.LOCK)  # another process's compare: its own open file, as flock sees it
    try:
        assert main(["compare", str(sweep), "--out", str(out)]) == 2
        line = one_line(capsys)
        assert f"{out} is in use by another compare (pid {os.getpid()} on " in line and "wait for it" in line
    finally:
        held.close()
    with lock.sweep_lock(out), lock.sweep_lock(out):  # free again, and the same process may enter twice
        with pytest.raises(UserError, match="in use by another compare"):
            lock._take(out / lock.LOCK)
    assert sorted(p.name for p in out.iterdir()) == [lock.LOCK]


def test_sigterm_stops_the_ray_launcher_as_ctrl_c_does():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), on_sigterm(_interrupt):  # `kill PID`: the tasks are then cancelled
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs as soon as the signal arrives
    assert signal.getsignal(signal.SIGTERM) == before
