"""The local launcher (experiments/jobs.py): one pool of workers for the whole sweep, the longest runs first."""

import dataclasses

from blocklab.experiments import jobs
from blocklab.experiments.runner import _train_phase
from blocklab.training.config import load_config


@dataclasses.dataclass
class Spec:
    name: str
    config: object
    label: str = ""


def config(**overrides):
    return load_config(None, [f"--{k}={v}" for k, v in overrides.items()], recipe=False)


def test_costliest_first_orders_by_work_and_keeps_the_plans_order_among_equals():
    small = config(**{"model.n_layers": 2, "model.d_model": 64})
    deep = config(**{"model.n_layers": 6, "model.d_model": 64})
    long = config(**{"model.n_layers": 2, "model.d_model": 64, "train.steps": 5000})
    runs = [Spec("a", small), Spec("b", deep), Spec("c", small), Spec("d", long)]
    assert jobs.run_cost(deep) > jobs.run_cost(small)
    assert [r.name for r in jobs.costliest_first(runs)] == ["d", "b", "a", "c"]


def test_the_phases_of_a_sweep_share_one_pool_of_workers(monkeypatch):
    pools, given = [], []

    class Pool:
        def __init__(self, n):
            self.n, self.closed = n, False
            pools.append(self)

        def shutdown(self):
            self.closed = True

    monkeypatch.setattr(jobs, "worker_pool", Pool)
    monkeypatch.setattr(jobs, "run_many", lambda tasks, n, *a, pool=None: given.append(pool) or ("completed", {}))
    launcher = jobs.LocalLauncher(2)
    launcher.run([("run",)] * 2)  # tuning
    launcher.run([("run",)])  # one extension: still the warm workers, not this process
    launcher.run([("run",)] * 3)  # final seeds
    assert len(pools) == 1 and pools[0].n == 2 and given == [pools[0]] * 3
    launcher.close()
    assert pools[0].closed and launcher._pool is None


def test_prepare_starts_the_workers_before_the_first_phase_and_they_serve_it(monkeypatch):
    pools, given = [], []

    class Pool:
        def __init__(self, n):
            self.n, self.submitted, self.closed = n, [], False
            pools.append(self)

        def submit(self, fn):
            self.submitted.append(fn)

        def shutdown(self):
            self.closed = True

    monkeypatch.setattr(jobs, "worker_pool", Pool)
    monkeypatch.setattr(jobs, "run_many", lambda tasks, n, *a, pool=None: given.append(pool) or ("completed", {}))
    jobs.LocalLauncher(1).prepare()
    assert pools == []  # one job trains in this process: no worker to start
    launcher = jobs.LocalLauncher(2)
    launcher.prepare()
    assert len(pools) == 1 and pools[0].submitted == [jobs._import_trainer] * 2  # each worker imports the trainer
    launcher.run([("run",)] * 2)
    assert given == [pools[0]] and len(pools) == 1
    launcher.close()
    assert pools[0].closed


def test_one_job_or_a_single_run_starts_no_worker(monkeypatch):
    monkeypatch.setattr(jobs, "worker_pool", lambda n: (_ for _ in ()).throw(AssertionError("a pool started")))
    monkeypatch.setattr(jobs, "run_many", lambda tasks, n, *a, pool=None: ("completed", {"pool": pool}))
    assert jobs.LocalLauncher(1).run([("run",)] * 4) == ("completed", {"pool": None})
    assert jobs.LocalLauncher(2).run([("run",)]) == ("completed", {"pool": None})


def test_a_phase_numbers_its_runs_in_the_order_they_start(tmp_path, monkeypatch):
    started = []

    class Launcher:
        def run(self, tasks, log, progress, on_done):
            started.extend((run.name, head.split("]")[0] + "]") for run, _dir, _resume, head in tasks)
            return "completed", {}

    monkeypatch.setattr("blocklab.experiments.runner.track_in_sweep", lambda *a: None)
    small = config(**{"model.n_layers": 2})
    deep = config(**{"model.n_layers": 6})
    runs = [Spec("shallow", small, "S"), Spec("deep", deep, "D")]
    _train_phase(runs, "sweep", tmp_path, Launcher(), False, lambda *a: None, {}, 2)
    assert started == [("deep", "[1/2]"), ("shallow", "[2/2]")]
