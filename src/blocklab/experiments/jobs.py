"""Many small runs at once (`compare --jobs N`): N separate processes, each training one run at a time with
its share of the CPU threads, or its own GPU where there are several.

Separate processes, not threads: each run is an ordinary `train` with its own interpreter, its own torch
thread pool and its own signal handlers, so a Ctrl-C reaches every run, each saves its checkpoint and writes
`interrupted`, and the same command resumes them. Small models on few cores gain from this because one run
cannot keep several cores busy with matrices this small (measured in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from blocklab.run_summary import RunSummary, summary_path, write_summary
from blocklab.training.threads import SMALL_WIDTH, cpu_count

# Measured on 2 cores (benchmarks/RESULTS.md, "compare --jobs"): 8 runs of the quick preset's shape train
# 1.2-1.3x faster 2 at a time, single-threaded, than one after another on both threads; 4 runs 0.89x (the
# workers' start is not paid back); d=512 runs gain about nothing (1.01-1.08x). SMALL_WIDTH: training/threads.py.
RUNS_PER_PROCESS = 4
# A run with one of these statuses is finished: kept as it is when the sweep runs again, never trained again.
FINISHED = ("completed", "diverged", "stalled")


def default_jobs(configs) -> int:
    """One run per GPU where there are several; on a CPU, one single-threaded run per core when every run is
    small (d_model <= SMALL_WIDTH) and there are at least RUNS_PER_PROCESS runs for each process to amortise
    its start (a spawned process imports torch), else one run at a time."""
    import torch

    if torch.cuda.is_available():
        return max(1, torch.cuda.device_count())
    configs = list(configs)
    cores = max(1, cpu_count())
    small = all(c.model.d_model <= SMALL_WIDTH for c in configs)
    return cores if small and len(configs) >= RUNS_PER_PROCESS * cores else 1


def _watch_parent(parent: int) -> None:
    """A worker whose compare process died (kill -9, a closed terminal) stops its run as SIGTERM does: it saves,
    writes `interrupted`, and leaves; the same command resumes it. Without this it would train on, orphaned."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(120.0)  # the run's handler saves its checkpoint meanwhile; then nobody waits for this process
    os._exit(1)


def _init_worker(threads: int, devices, slot) -> None:
    """Each worker: its share of the threads (OMP_NUM_THREADS too: a run's train.threads 0 keeps it), and on several
    GPUs its own device (before CUDA starts)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    if devices:
        with slot.get_lock():
            index = slot.value
            slot.value += 1
        os.environ["CUDA_VISIBLE_DEVICES"] = str(devices[index % len(devices)])
    import torch

    torch.set_num_threads(threads)


def _import_trainer() -> None:
    import blocklab.training.trainer  # noqa: F401


def _train_one(config, run_dir: str, resume: bool, label: str, jobs: int) -> RunSummary:
    import torch

    from blocklab.training import train

    def log(*parts):  # status lines to stderr, as every command's; results stay on stdout
        print(f"  [{label}]", *parts, file=sys.stderr, flush=True)

    summary = train(config, run_dir, resume=resume, progress=False, log=log)
    return record_run(Path(run_dir), summary, torch.get_num_threads(), jobs)


def record_run(
    run_dir: Path, summary: RunSummary, threads: int, jobs: int, launcher: str = "local", **where
) -> RunSummary:
    """summary.json says where the run trained and how it shared the machine: the launcher (`local`, or `ray`
    with `ray_node_id`), the host, its thread count and how many runs ran at once (throughput and wall-clock
    figures of a run that shared the machine are not a speed measurement)."""
    where = {"host": socket.gethostname(), **where}
    summary = summary.with_fields(launcher=launcher, **where, threads=threads, concurrent_runs=jobs)
    if summary_path(run_dir).is_file():
        write_summary(run_dir, summary)
    return summary


class LocalLauncher:
    """The runs of a sweep on this machine, `jobs` at a time (run_many). The other launcher, `compare --launcher
    ray` (experiments/ray_launcher.py), has the same three methods: the sweep's phases see no difference.

    With several jobs the worker processes outlive a phase: the tuning runs, the grid's extensions and the final
    seeds share them, so each worker imports torch and warms up once per sweep, not once per phase (about 6 s a
    worker on 2 cores, measured in the demo's log)."""

    name = "local"

    def __init__(self, jobs: int = 1):
        self.jobs = jobs
        self._pool = None

    def start(self, out: Path, log=print) -> None:
        """Ready to train into `out` (nothing to check on this machine: compare has checked the folder)."""

    def prepare(self) -> None:
        """Start the workers now, before the sweep is planned: each imports torch and the trainer (seconds on a
        fresh install, where every module is compiled once) while compare reads the runs and the folder."""
        if self.jobs > 1 and self._pool is None:
            self._pool = worker_pool(self.jobs)
            for _ in range(self.jobs):
                self._pool.submit(_import_trainer)

    def run(self, tasks: list[tuple], log=print, progress=None, on_done=None) -> tuple[str, dict]:
        if self.jobs > 1 and self._pool is None and len(tasks) > 1:
            self._pool = worker_pool(self.jobs)
        return run_many(tasks, self.jobs, log, progress, on_done, pool=self._pool)

    def close(self) -> None:
        """The workers leave with the sweep."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def run_cost(config) -> float:
    """A run's training work, roughly (tokens x the weights a token passes through): to start the longest runs
    of a phase first, so that its end is not one long run on one core while the others wait."""
    t = config.train
    return float(t.steps) * t.batch_size * config.data.seq_len * config.model.rough_parameters


def costliest_first(runs: list) -> list:
    """`runs` (RunSpecs) in the order a phase trains them: by run_cost, longest first (the longest-processing-time
    rule), the plan's order among equals."""
    return sorted(runs, key=lambda run: -run_cost(run.config))


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """`jobs` spawned processes, each with its share of the CPU threads or its own GPU (_init_worker)."""
    import multiprocessing as mp

    import torch

    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    ctx = mp.get_context("spawn")  # never fork a process that holds torch's thread pools
    slot = ctx.Value("i", 0)
    return ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker, initargs=(_threads(jobs), devices, slot))


def _threads(jobs: int) -> int:
    import torch

    return 1 if torch.cuda.is_available() else max(1, cpu_count() // jobs)


def run_many(tasks: list[tuple], jobs: int, log=print, progress=None, on_done=None, pool=None) -> tuple[str, dict]:
    """Train every (RunSpec, run_dir, resume, head) of `tasks`, `jobs` at a time in their order,
    in `pool`'s workers where given (else in workers of their own, or in this process for one job or one run).
    Returns (status, {name: summary}) with status "interrupted" as soon as one run was interrupted (the runs not
    yet started are not started)."""
    from blocklab.training import train

    results: dict = {}
    if pool is None and (jobs <= 1 or len(tasks) <= 1):
        import torch

        for run, run_dir, resume, head in tasks:
            log(f"{head}: {'resuming' if resume else 'training'} ({run.config.train.steps} steps)")
            summary = record_run(
                run_dir,
                train(run.config, run_dir, resume=resume, progress=progress, log=log),
                torch.get_num_threads(),
                1,
            )
            results[run.name] = summary
            (on_done or (lambda *a: None))(run, head, summary)
            if summary.status == "interrupted":
                return "interrupted", results
        return "completed", results
    if pool is not None:
        return _run_parallel(pool, tasks, jobs, log, on_done, results)
    with worker_pool(jobs) as own:
        return _run_parallel(own, tasks, jobs, log, on_done, results)


def _run_parallel(pool, tasks, jobs, log, on_done, results) -> tuple[str, dict]:
    import torch

    status = "completed"
    pending = list(tasks)
    where = "one GPU each" if torch.cuda.is_available() else f"{_threads(jobs)} thread(s) each"
    log(f"{len(tasks)} runs, {jobs} at a time ({where})")
    running = {}

    def submit():
        run, run_dir, resume, head = pending.pop(0)
        log(f"{head}: {'resuming' if resume else 'training'} ({run.config.train.steps} steps)")
        running[pool.submit(_train_one, run.config, str(run_dir), resume, run.name, jobs)] = (run, head)

    while pending and len(running) < jobs:
        submit()

    def forward(signum, frame):  # `kill PID` reaches this process alone: each run must save too
        for proc in list(getattr(pool, "_processes", {}).values()):
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        raise KeyboardInterrupt

    with on_sigterm(forward) as installed:
        try:
            while running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    run, head = running.pop(fut)
                    summary = fut.result()
                    results[run.name] = summary
                    (on_done or (lambda *a: None))(run, head, summary)
                    if summary.status == "interrupted":
                        status = "interrupted"
                while status == "completed" and pending and len(running) < jobs:
                    submit()
        except KeyboardInterrupt:
            # Ctrl-C reached the workers too (SIGTERM was forwarded): each saves its run and returns
            # `interrupted`; wait for them, so that nothing trains on after compare has returned.
            if installed:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            status = "interrupted"
            for fut, (run, _head) in running.items():
                try:
                    results[run.name] = fut.result()
                except (KeyboardInterrupt, Exception):  # a worker that died before its handler: resumable
                    pass
    return status, results


@contextlib.contextmanager
def on_sigterm(handler):
    """`handler` for SIGTERM in the block (`kill PID` reaches compare alone, not its runs), the previous one after;
    yields whether it was installed (not in a thread other than the main one: its caller handles its signals)."""
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:
        previous = None
    try:
        yield previous is not None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
