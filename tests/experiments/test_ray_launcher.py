"""`compare --launcher ray` on a real two-node Ray cluster on this machine (tests/experiments/ray_cluster.py): the
runs land on both nodes and give the local launcher's verdicts score for score; a node lost mid-run is survived
by resuming from the checkpoint; SIGTERM cancels; a second compare, a client without the token and a node that
cannot write the folder are refused in one line. Each compare is a process, as a user runs it."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blocklab.cli import main
from tests.cli.test_compare_cli import write_sweep
from tests.experiments.ray_cluster import RayCluster, alive

pytestmark = pytest.mark.slow

TIMEOUT_S = 420  # one compare of a few tiny runs, on a busy 2-core machine


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster()
    try:
        c.start_head()
        c.add_worker()
        yield c
    finally:
        c.stop()
        shutil.rmtree(c.root, ignore_errors=True)


@pytest.fixture
def two_nodes(cluster):
    """The module's cluster with its worker alive (a test that killed it gets a new one)."""
    worker = cluster.nodes[1]
    if worker.proc.poll() is not None or worker.raylet() is None:
        cluster.nodes[1] = cluster.add_worker()
    return cluster


def sweep_file(tmp_path, overrides, steps, seeds=(0, 1), values=None):
    """Two groups (Pre-LN, SAS-P); tuned on one seed over `values` (no extension) when given."""
    path = write_sweep(tmp_path / "sweep.toml", overrides, steps=steps, values=values or (1e-3,), seeds=seeds)
    text = path.read_text()
    if values:
        text = text.replace("[tune]\n", "[tune]\nseeds = [5]\nextend = 0\n")
    else:
        text = text.replace("[tune]\nvalues = [0.001]\n", "")
    path.write_text(text.replace("checkpoint_every = 100", "checkpoint_every = 10"))
    return path


def compare(cluster, sweep, out, *args, token=True, **popen):
    """`blocklab compare --launcher ray` against the cluster, as a process (its output to files, not pipes)."""
    env = cluster.env(token)
    if not token:
        env["HOME"] = str(cluster.root / "home")  # no ~/.ray/auth_token to fall back on
    cmd = [sys.executable, "-m", "blocklab", "compare", str(sweep), "--out", str(out), "--no-report"]
    cmd += ["--launcher", "ray", "--ray-address", cluster.address, *args]
    log = Path(f"{out}.log")
    with open(log, "w") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, **popen), log


def finished(proc, log, timeout=TIMEOUT_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"compare did not end in {timeout} s:\n{log.read_text()[-4000:]}")


def without_timing(value):
    """verdicts.json less its throughput figures: tokens/s, and the ratio of two in a claim's why, are measured
    (every other number is computed from the runs' scores)."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k != "tokens_per_s"}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return re.sub(r"throughput [0-9.]+x", "throughput", value) if isinstance(value, str) else value


def losses(run_dir: Path) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("eval_loss")) for r in rows]


def local_reference(sweep, out, monkeypatch) -> dict:
    """The sweep through the local launcher, two runs at once of one thread each, as the cluster trains them."""
    monkeypatch.setattr("blocklab.experiments.jobs.cpu_count", lambda: 2)  # 2 processes x 1 thread anywhere
    assert main(["compare", str(sweep), "--out", str(out), "--jobs", "2", "--no-report", "--no-progress"]) == 0
    return json.loads((out / "verdicts.json").read_text())


def trained_on(cluster, node_index: int, timeout=TIMEOUT_S) -> tuple[str, str]:
    """(run name, node id prefix) of the first run a node's worker says it trains, from its log files."""
    logs = cluster.root / f"n{node_index}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        for f in logs.glob("session_*/logs/worker-*.err"):
            for line in f.read_text(errors="replace").splitlines():
                if "] training on " in line:
                    name = line.split("[", 1)[1].split("]", 1)[0]
                    return name, line.rsplit("(node ", 1)[1].rstrip(")")
        time.sleep(0.05)
    pytest.fail(f"no run started on node n{node_index} in {timeout} s")


def test_a_sweep_lands_on_both_nodes_with_the_local_launchers_verdicts(two_nodes, tmp_path, overrides, monkeypatch):
    # Tuning, then final seeds: long enough that some runs score and others fail (end on the unigram plateau).
    sweep = sweep_file(tmp_path, overrides, steps=100, values=(1e-2, 3e-2))
    proc, log = compare(two_nodes, sweep, tmp_path / "ray")
    assert finished(proc, log) == 0, log.read_text()[-4000:]
    reference = local_reference(sweep, tmp_path / "local", monkeypatch)
    got = json.loads((tmp_path / "ray" / "verdicts.json").read_text())
    assert without_timing(got) == without_timing(reference)
    statuses = [s for g in got["experiments"]["tiny"]["groups"].values() for p in g["curve"] for s in p["statuses"]]
    assert "completed" in statuses and len(statuses) == 4  # scores to compare, not only failures
    runs = sorted(p.name for p in (tmp_path / "local" / "runs").iterdir())
    assert runs == sorted(p.name for p in (tmp_path / "ray" / "runs").iterdir()) and len(runs) == 8
    nodes = set()
    for name in runs:  # the same losses, bit for bit, at every logged step
        assert losses(tmp_path / "ray" / "runs" / name) == losses(tmp_path / "local" / "runs" / name), name
        summary = json.loads((tmp_path / "ray" / "runs" / name / "summary.json").read_text())
        assert summary["launcher"] == "ray" and summary["threads"] == 1 and summary["concurrent_runs"] == 2
        nodes.add(summary["ray_node_id"])
        local = json.loads((tmp_path / "local" / "runs" / name / "summary.json").read_text())
        assert local["launcher"] == "local" and "ray_node_id" not in local
    assert len(nodes) == 2  # both nodes trained
    text = log.read_text()
    assert "[1/8] " in text and "queued on the cluster to train (100 steps)" in text
    assert " tokens/s on " in text and "(node " in text  # the progress lines name the node


def test_a_lost_node_is_survived_by_resuming_from_the_checkpoint(two_nodes, tmp_path, overrides, monkeypatch):
    sweep = sweep_file(tmp_path, overrides, steps=300)
    out = tmp_path / "ray"
    proc, log = compare(two_nodes, sweep, out)
    try:
        name, node = trained_on(two_nodes, 1)
        run = out / "runs" / name
        deadline, saved = time.time() + TIMEOUT_S, []
        while not saved and time.time() < deadline:  # a checkpoint, and the metrics up to it
            steps = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoints/step-*") if "tmp" not in p.name)
            rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []
            if steps and len(rows) >= steps[-1]:
                saved = rows[: steps[-1]]
            time.sleep(0.02)
        assert saved and not (run / "summary.json").exists(), "the run ended before its node could be lost"
        raylet = two_nodes.nodes[1].raylet()
        os.kill(raylet, signal.SIGKILL)  # the worker node is lost, its run mid-way
        assert finished(proc, log) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and not summary["ray_node_id"].startswith(node)  # ended on the head
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == list(range(1, 301))  # one continuous step sequence
    # Resumed, not restarted: the rows up to its checkpoint are the ones written before the loss, timings and all.
    assert rows[: len(saved)] == saved
    assert {json.loads(p.read_text())["status"] for p in out.glob("runs/*/summary.json")} == {"completed"}
    reference = local_reference(sweep, tmp_path / "local", monkeypatch)
    assert without_timing(json.loads((out / "verdicts.json").read_text())) == without_timing(reference)


def test_sigterm_cancels_the_tasks_and_the_same_command_resumes(two_nodes, tmp_path, overrides):
    sweep = sweep_file(tmp_path, overrides, steps=3000, seeds=(0,))
    out = tmp_path / "ray"
    proc, log = compare(two_nodes, sweep, out)
    try:
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline and sum(p.stat().st_size > 0 for p in out.glob("runs/*/metrics.jsonl")) < 2:
            time.sleep(0.05)
        # A second compare into the same folder meanwhile: refused in one line, nothing touched.
        other = subprocess.run(
            [sys.executable, "-m", "blocklab", "compare", str(sweep), "--out", str(out), "--launcher", "ray",
             "--ray-address", two_nodes.address, "--no-report"],
            env=two_nodes.env(), capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
        assert other.returncode == 2 and "in use by another compare" in other.stderr
        assert len(other.stderr.strip().splitlines()) <= 2  # the sweep's status line and the refusal
        assert not list(out.glob("runs/*/summary.json")), "the runs ended before the signal: raise their steps"
        proc.send_signal(signal.SIGTERM)  # to compare alone, as `kill PID` sends it
        assert finished(proc, log) == 130, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in out.glob("runs/*/summary.json")}
    assert set(statuses.values()) == {"interrupted"} and len(statuses) == 2, statuses
    sizes = {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")}
    time.sleep(2)
    assert {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")} == sizes  # nothing trains on
    proc, log = compare(two_nodes, sweep, out)
    assert finished(proc, log) == 0, log.read_text()[-4000:]
    for run in out.glob("runs/*"):
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
        assert [s for s, _, _ in losses(run)] == list(range(1, 3001))


def test_a_client_without_the_token_is_refused_in_one_line(cluster, tmp_path, overrides):
    sweep = sweep_file(tmp_path, overrides, steps=6)
    proc, log = compare(cluster, sweep, tmp_path / "out", token=False)
    assert finished(proc, log, timeout=120) == 2
    err = log.read_text().strip().splitlines()
    assert "refused this client" in err[-1] and "RAY_AUTH_TOKEN" in err[-1] and "Traceback" not in log.read_text()
    assert not (tmp_path / "out" / "runs").exists()


def test_a_node_that_cannot_write_the_folder_is_refused_before_any_run(cluster, tmp_path, overrides):
    out = tmp_path / "out"
    out.mkdir()
    # A third node that sees the folder read-only: its own mount namespace, with the folder bound over itself.
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    node = cluster.add_worker("127.0.0.4", prefix=[*unshare, "sh", "-c", mount, str(out)])
    try:
        sweep = sweep_file(tmp_path, overrides, steps=6)
        proc, log = compare(cluster, sweep, out)
        assert finished(proc, log, timeout=240) == 2
        err = log.read_text().strip().splitlines()[-1]
        assert "cannot write there (Read-only file system)" in err and "shared file system" in err, err
        assert not (out / "runs").exists() and not list(out.glob(".ray-check-*"))
    finally:
        cluster.remove(node)
    assert not alive(node.proc.pid)
