"""`compare --launcher ray` on a real two-node Ray cluster on this machine (tests/experiments/ray_cluster.py): the
runs land on both nodes and give the local launcher's verdicts score for score, a node lost mid-run resuming from
its checkpoint (one sweep: each compare costs a process, a connection and a worker per node, and the local
reference a second training of the sweep); Ctrl-C cancels the tasks and the same command resumes; a second
compare, a client without the token and a node that cannot write the folder are refused in one line. Each compare
is a process, as a user runs it. The mistakes found before any connection: tests/cli/test_compare_launcher.py."""

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
from tests.experiments.ray_cluster import RayCluster

pytestmark = pytest.mark.slow

TIMEOUT_S = 420  # one compare of a few tiny runs, on a busy 2-core machine


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the module: a head on 127.0.0.2 and a worker on 127.0.0.3, 1 CPU each. The worker cannot
    write one folder, `read_only` (read_only_worker): the refusal's test needs no third node of its own, and every
    other test's folder both nodes write."""
    c = RayCluster()
    try:
        c.read_only = c.root / "read-only"
        c.read_only.mkdir()
        c.worker_setup, c.read_only_error = read_only_worker(c)
        c.start(**c.worker_setup)
        yield c
    finally:
        c.stop()
        shutil.rmtree(c.root, ignore_errors=True)


@pytest.fixture
def two_nodes(cluster):
    """The module's cluster with its worker alive (a test that killed it leaves a new one to the next)."""
    worker = cluster.nodes[1]
    if not worker.alive():
        cluster.remove(worker)
        cluster.add_worker(**cluster.worker_setup)
    return cluster


def sweep_file(tmp_path, overrides, steps, seeds=(0, 1), values=None, lr=1e-2, short=None):
    """Two groups (Pre-LN, SAS-P), a checkpoint every 10 steps: tuned on one seed over `values` (no extension)
    when given, else at `lr`; with `short`, Pre-LN's runs take that many steps."""
    path = write_sweep(tmp_path / "sweep.toml", overrides, steps=steps, values=values or (lr,), seeds=seeds)
    text = path.read_text().replace("checkpoint_every = 100", "checkpoint_every = 10")
    if values:
        text = text.replace("[tune]\n", "[tune]\nseeds = [5]\nextend = 0\n")
    else:
        text = text.replace(f"[tune]\nvalues = [{lr!r}]\n", "").replace("[base.train]\n", f"[base.train]\nlr = {lr}\n")
    if short:
        text = text.replace('"model.block" = "pre-ln"', f'"model.block" = "pre-ln"\n"train.steps" = {short}')
    path.write_text(text)
    return path


def compare(cluster, sweep, out, *args, token=True):
    """`blocklab compare --launcher ray` against the cluster, as a process in its own session (a terminal's
    foreground group), its output to a file."""
    env = cluster.env(token)
    if not token:
        env["HOME"] = str(cluster.root / "home")  # no ~/.ray/auth_token to fall back on
    cmd = [sys.executable, "-m", "blocklab", "compare", str(sweep), "--out", str(out), "--no-report"]
    cmd += ["--launcher", "ray", "--ray-address", cluster.address, *args]
    log = Path(f"{out}.log")
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, log


def finished(proc, log, timeout=TIMEOUT_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"compare did not end in {timeout} s:\n{log.read_text()[-4000:]}")


def wait_for(condition, what: str, proc, log, timeout=TIMEOUT_S, every=0.05):
    """Poll `condition` until it returns something true (returned); fail when compare ends or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = condition()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"compare ended (exit {proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        time.sleep(every)
    pytest.fail(f"no {what} in {timeout} s:\n{log.read_text()[-4000:]}")


def without_timing(value):
    """verdicts.json less its throughput figures: tokens/s, the ratio of two in a claim's why, and whether they were
    measured alone (the reference trains one run at a time) are measured; every other number comes from scores."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in ("tokens_per_s", "measured_alone")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"throughput [0-9.]+x ([^ ]+)( \(runs shared the machine\))?", r"throughput against \1", value)
    return value


def losses(run_dir: Path) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("eval_loss")) for r in rows]


def statuses(out: Path) -> dict:
    return {p.parent.name: json.loads(p.read_text())["status"] for p in out.glob("runs/*/summary.json")}


def local_reference(sweep, out) -> dict:
    """The sweep through the local launcher, in this process, one thread (tests/conftest.py) as each Ray task has
    (no worker processes to start: the quickest reference)."""
    assert main(["compare", str(sweep), "--out", str(out), "--jobs", "1", "--no-report", "--no-progress"]) == 0
    return json.loads((out / "verdicts.json").read_text())


def test_ctrl_c_cancels_the_tasks_and_the_same_command_resumes(two_nodes, tmp_path, overrides):
    # Long SAS-P runs and short Pre-LN ones; a phase starts its costliest runs first, so the SAS-P runs train
    # first: Ctrl-C once one of them has finished and another trains (the Pre-LN runs still queued).
    sweep = sweep_file(tmp_path, overrides, steps=200, seeds=(0, 1, 2), short=20)
    out = tmp_path / "ray"
    proc, log = compare(two_nodes, sweep, out)
    try:

        def one_finished_and_another_trains():
            # "finished" once compare has its result (its " tokens/s on " line), not when summary.json appears: a
            # Ctrl-C while the task's reply is in flight can abort Ray's driver (ray-project/ray#54260).
            ended = {p.parent for p in out.glob("runs/sas-p_s*/summary.json")}
            training = [p for p in out.glob("runs/sas-p_s*/metrics.jsonl") if p.parent not in ended]
            received = " tokens/s on " in log.read_text()
            return ended and received and any(p.stat().st_size > 0 for p in training)

        wait_for(one_finished_and_another_trains, "a finished SAS-P run and another training", proc, log)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: to the terminal's foreground group, compare's own
        assert finished(proc, log) == 130, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    found = statuses(out)
    # One run or two (one a node) were training: each saved and wrote `interrupted`; the queued ones never started.
    assert 1 <= list(found.values()).count("interrupted") <= 2 and "completed" in found.values(), found
    assert set(found.values()) <= {"completed", "interrupted"}  # no half-written folder
    assert sorted(p.name for p in out.glob("runs/*")) == sorted(found) and len(found) < 6
    finished_runs = {n: (out / "runs" / n / "summary.json").read_bytes() for n, s in found.items() if s == "completed"}
    assert "(cancelled); the same command resumes it" in log.read_text()
    sizes = {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")}
    time.sleep(2)
    assert {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")} == sizes  # nothing trains on
    proc, log = compare(two_nodes, sweep, out)
    try:  # the same command resumes; a second compare into the folder meanwhile is refused in one line
        wait_for(lambda: "Ray: 2 node(s)" in log.read_text(), "connection", proc, log)
        os.kill(proc.pid, signal.SIGSTOP)  # it holds the folder however soon its runs would end
        other = subprocess.run(
            [sys.executable, "-m", "blocklab", "compare", str(sweep), "--out", str(out), "--launcher", "ray",
             "--ray-address", two_nodes.address, "--no-report"],
            env=two_nodes.env(), capture_output=True, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert other.returncode == 2 and "in use by another compare (pid " in other.stderr, other.stderr
    assert len(other.stderr.strip().splitlines()) == 2  # the sweep's status line and the refusal
    assert finished(proc, log) == 0, log.read_text()[-4000:]
    assert set(statuses(out).values()) == {"completed"} and len(statuses(out)) == 6
    for name, summary in finished_runs.items():  # a finished run is kept as it is, never trained again
        assert (out / "runs" / name / "summary.json").read_bytes() == summary
        assert f"[{name}] training on " not in log.read_text()
    for name in set(found) - set(finished_runs):
        assert f"[{name}] resuming on " in log.read_text()
    for run in out.glob("runs/sas-p_*"):
        assert [s for s, _, _ in losses(run)] == list(range(1, 201))


def test_a_client_without_the_token_is_refused_in_one_line(cluster, tmp_path, overrides):
    sweep = sweep_file(tmp_path, overrides, steps=6)
    proc, log = compare(cluster, sweep, tmp_path / "out", token=False)
    assert finished(proc, log, timeout=120) == 2
    err = log.read_text().strip().splitlines()
    assert "refused this client" in err[-1] and "RAY_AUTH_TOKEN" in err[-1] and "Traceback" not in log.read_text()
    assert not (tmp_path / "out" / "runs").exists()


def test_a_node_that_cannot_write_the_folder_is_refused_before_any_run(two_nodes, tmp_path, overrides):
    out = two_nodes.read_only  # the worker node cannot write it, the head can
    sweep = sweep_file(tmp_path, overrides, steps=6)
    proc, log = compare(two_nodes, sweep, out)
    assert finished(proc, log, timeout=240) == 2
    err = log.read_text().strip().splitlines()[-1]
    assert f"cannot write there ({two_nodes.read_only_error})" in err and "shared file system" in err, err
    assert not (out / "runs").exists() and not list(out.glob(".ray-check-*"))


def test_a_sweep_lands_on_both_nodes_survives_a_lost_node_and_gives_the_local_launchers_verdicts(
    two_nodes, tmp_path, overrides
):
    # Tuning on one seed (4 runs), then the final seeds (4 runs), two at a time. The worker node is lost mid-way
    # through its first final run: the tuning runs it finished stay its own (the runs land on both nodes), and the
    # lost run resumes on the head from its checkpoint. Last of the tests: the worker is not started again.
    sweep = sweep_file(tmp_path, overrides, steps=100, values=(1e-2, 3e-2))
    out = tmp_path / "ray"
    worker = two_nodes.nodes[1]
    before = worker.worker_logs()
    proc, log = compare(two_nodes, sweep, out)
    try:

        def final_run_on_worker():  # from its worker's stderr, "  [NAME] training on ...": not the tuning seed's
            return next((x for x in worker.lines_since(before) if "] training on " in x and "_s5]" not in x), None)

        line = wait_for(final_run_on_worker, "final run on the worker node", proc, log)
        run, node = out / "runs" / line.split("[", 1)[1].split("]", 1)[0], line.rsplit("(node ", 1)[1][:8]

        def checkpointed():  # a checkpoint past the first, and the metrics rows up to it
            steps = [int(p.name.split("-")[1]) for p in run.glob("checkpoints/step-*") if p.name[5:].isdigit()]
            rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []
            return max(steps, default=0) >= 20 and len(rows) >= max(steps) and rows[: max(steps)]

        saved = wait_for(checkpointed, "checkpoint on the worker node", proc, log, every=0.01)
        assert not (run / "summary.json").exists(), "the run ended before its node could be lost: raise its steps"
        os.kill(worker.raylet(), signal.SIGKILL)  # the worker node is lost, its run mid-way
        assert finished(proc, log) == 0, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    reference = local_reference(sweep, tmp_path / "local")
    got = json.loads((out / "verdicts.json").read_text())
    assert without_timing(got) == without_timing(reference)
    outcomes = [s for g in got["experiments"]["tiny"]["groups"].values() for p in g["curve"] for s in p["statuses"]]
    assert "completed" in outcomes and len(outcomes) == 4  # scores to compare, not only failures
    runs = sorted(p.name for p in (tmp_path / "local" / "runs").iterdir())
    assert runs == sorted(p.name for p in (out / "runs").iterdir()) and len(runs) == 8
    assert "partial" not in statuses(out).values() and len(statuses(out)) == 8
    nodes, hosts = set(), set()
    for name in runs:  # the same losses, bit for bit, at every logged step: the lost run's as if never disturbed
        assert losses(out / "runs" / name) == losses(tmp_path / "local" / "runs" / name), name
        summary = json.loads((out / "runs" / name / "summary.json").read_text())
        assert summary["launcher"] == "ray" and summary["threads"] == 1 and summary["concurrent_runs"] == 2
        nodes.add(summary["ray_node_id"])
        hosts.add(summary["host"])
        local = json.loads((tmp_path / "local" / "runs" / name / "summary.json").read_text())
        assert local["launcher"] == "local" and "ray_node_id" not in local and local["host"] in hosts
    assert len(nodes) == 2  # both nodes trained
    summary = json.loads((run / "summary.json").read_text())
    assert not summary["ray_node_id"].startswith(node)  # the lost run finished on the head
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == list(range(1, summary["step"] + 1))  # one continuous sequence
    # Resumed, not restarted: the rows up to its checkpoint are the ones written before the loss, timings and all.
    assert rows[: len(saved)] == saved
    text = log.read_text()
    assert "Ray: 2 node(s) at 127.0.0.2:" in text and "[1/8] " in text and "queued on the cluster to train" in text
    done = [line for line in text.splitlines() if " tokens/s on " in line]
    assert len(done) == 8 and {line.rsplit("(node ", 1)[1][:8] for line in done} == {n[:8] for n in nodes}
    # Each run trained once, nothing retried, but the lost run: resumed once. (Its start on the worker reaches
    # compare's log only when the worker's log monitor sent it before the node went.)
    for name in runs:
        assert text.count(f"[{name}] resuming on ") == (name == run.name), name
        assert text.count(f"[{name}] training on ") == 1 or name == run.name, name
    assert text.count(f"[{run.name}] training on ") <= 1


# A node whose Python is refused writes under one folder (where no mount namespace can be made: a CI runner
# without user namespaces), as a node whose mount of the shared folder is read-only is.
REFUSE_WRITES = """
import builtins, errno, io, os
_folder = os.environ["BLOCKLAB_TEST_READ_ONLY"]
_open = io.open


def _refusing(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
        if os.path.abspath(os.fspath(file)).startswith(_folder + os.sep):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(file))
    return _open(file, mode, *args, **kwargs)


builtins.open = io.open = _refusing
"""


def read_only_worker(cluster) -> tuple[dict, str]:
    """How to start a worker that cannot write `cluster.read_only` (add_worker's prefix and env), and the error it
    meets: its own mount namespace with the folder bound read-only over itself where the kernel lets this user
    make one, else its Python refused writes there."""
    out = cluster.read_only
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    if subprocess.run([*unshare, "true"], capture_output=True).returncode == 0:
        mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
        return {"prefix": [*unshare, "sh", "-c", mount, str(out)]}, "Read-only file system"
    site = cluster.root / "refuse-writes"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REFUSE_WRITES)
    path = os.pathsep.join([str(site), cluster.env()["PYTHONPATH"]])
    return {"env": {"PYTHONPATH": path, "BLOCKLAB_TEST_READ_ONLY": str(out.resolve())}}, "Permission denied"
