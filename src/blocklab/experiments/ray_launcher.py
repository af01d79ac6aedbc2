"""`compare --launcher ray`: each run of a sweep is one Ray task on a Ray cluster (docs/sweeps.md#on-a-cluster;
starting a cluster: the README, "On a cluster").

The launcher is the local pool's twin (experiments/jobs.py, LocalLauncher): the sweep's phases hand it the runs
to train and get their summaries back, so tuning, final seeds, sizes, verdicts and the report are the same
whichever launcher ran them. Every run folder is DIR/runs/NAME on a file system that every node sees; each
task trains into it with `blocklab.training.train`, one thread per requested CPU, exactly as a local run does.

Faults are Ray's to handle, with its own mechanisms: a task whose node or worker was lost is retried by Ray
(`max_retries`) on a node that is alive, and the retry resumes the run from its last checkpoint (a finished run
is returned as it is, never trained again); an exception of the run's own is never retried
(`retry_exceptions=False`), and a run that diverges or stalls is a result, not a failure of the task. Ctrl-C or
SIGTERM on compare cancels the outstanding tasks (`ray.cancel`): queued ones never start, and a training one
receives Ray's KeyboardInterrupt, which the training loop takes as it takes Ctrl-C: it saves its checkpoint,
writes `interrupted` and stops, so the same command resumes it.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import uuid
from pathlib import Path

from blocklab.errors import UserError, import_extra
from blocklab.experiments.jobs import FINISHED, on_sigterm, record_run
from blocklab.experiments.sweep import run_status
from blocklab.run_summary import RunSummary, read_summary

RETRIES = 3  # Ray's retries of a task whose node or worker was lost, each resuming the run
PROBE_TIMEOUT_S = 180  # the folder check on every node: a worker to start and torch to import
CONNECT_TIMEOUT_S = 10  # a TCP answer from the cluster's address before Ray is asked to connect
CANCEL_TIMEOUT_S = 300  # cancelled runs saving their checkpoints; after this they are killed (still resumable)
# A local instance serves this compare alone: Ray's own switch keeps it on the loopback address (Ray otherwise
# binds a new instance to the machine's network address).
LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def cluster_address(given: str | None) -> str | None:
    """The cluster compare connects to: --ray-address, else RAY_ADDRESS, else None (a local Ray instance)."""
    return given or os.environ.get("RAY_ADDRESS") or None


# Ray folds alike lines of several workers into one ("[repeated 2x across cluster]"): never a run's own lines
# ("  [NAME] ..."), which say which run started where. Read when ray is imported, as the switch above.
NEVER_FOLD = ("RAY_DEDUP_LOGS_ALLOW_REGEX", r"^\s*\[[^]]+\] ")


def require_ray(address: str | None):
    """The ray module, or one line naming the extra that installs it."""
    if "ray" not in sys.modules:
        os.environ.setdefault(*NEVER_FOLD)
        if address is None:
            os.environ.setdefault(LOOPBACK_ONLY, "0")
    return import_extra("ray", "ray", "compare --launcher ray")


class RayLauncher:
    """The runs of a sweep as Ray tasks of `cpus` CPUs and `gpus` GPUs each (a fraction shares a GPU)."""

    name = "ray"

    def __init__(self, address: str | None = None, cpus: float = 1, gpus: float = 0):
        self.address, self.cpus, self.gpus = address, cpus, gpus
        self.ray = None
        self.capacity = 1
        self.sharing: dict = {}  # node id -> the runs its machine trains at once (its nodes' slots together)

    def start(self, out: Path, log=print) -> None:
        """Connect, find the nodes that can take a run, and check that each sees `out` and can write there."""
        if self.ray is not None:
            return
        ray = require_ray(self.address)
        where = self.address or "a local Ray instance"
        if self.address:
            reachable(self.address)
        try:
            if self.address:
                ray.init(address=self.address, logging_level="ERROR")
            else:
                ray.init(address="local", logging_level="ERROR", include_dashboard=False)
        except ray.exceptions.AuthenticationError:
            raise UserError(
                f"the Ray cluster at {where} refused this client: it needs the cluster's token "
                "(RAY_AUTH_TOKEN, or a file named by RAY_AUTH_TOKEN_PATH, with RAY_AUTH_MODE=token)"
            ) from None
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UserError(f"cannot connect to the Ray cluster at {where}: {_first_line(e)}") from None
        self.ray = ray
        nodes = [n for n in ray.nodes() if n.get("Alive") and self._fits(n.get("Resources", {}))]
        if not nodes:
            self.close()
            raise UserError(
                f"no node of the Ray cluster at {where} has {self.cpus:g} CPU(s) and {self.gpus:g} GPU(s) free "
                "for one run; lower --cpus-per-run / --gpus-per-run or add such a node"
            )
        self.capacity = sum(self._slots(n["Resources"]) for n in nodes)
        per_host: dict = {}
        for n in nodes:
            host = n.get("NodeManagerHostname") or n["NodeManagerAddress"]
            per_host[host] = per_host.get(host, 0) + self._slots(n["Resources"])
        self.sharing = {n["NodeID"]: per_host[n.get("NodeManagerHostname") or n["NodeManagerAddress"]] for n in nodes}
        try:
            check_folder(ray, out, nodes)
        except UserError:
            self.close()
            raise
        log(
            f"Ray: {len(nodes)} node(s) at {where}, {self.capacity} run(s) at once of {self.cpus:g} CPU(s)"
            + (f" and {self.gpus:g} GPU" if self.gpus else "")
        )

    def _fits(self, resources: dict) -> bool:
        return self._slots(resources) > 0

    def _slots(self, resources: dict) -> int:
        """How many runs a node of these resources takes at once."""
        slots = int(resources.get("CPU", 0) // self.cpus)
        return min(slots, int(resources.get("GPU", 0) // self.gpus)) if self.gpus else slots

    def run(self, tasks: list[tuple], log=print, progress=None, on_done=None) -> tuple[str, dict]:
        """Train every (RunSpec, run_dir, resume, head) of `tasks` as a task each; returns (status, {name: summary})
        as run_many does, "interrupted" when a run was interrupted or compare was asked to stop."""
        ray = self.ray
        remote = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=RETRIES, retry_exceptions=False)(
            train_task
        )
        threads = max(1, int(self.cpus))
        running: dict = {}
        results: dict = {}
        status = "completed"
        try:
            with on_sigterm(_interrupt):
                for run, run_dir, resume, head in tasks:
                    log(
                        f"{head}: queued on the cluster to {'resume' if resume else 'train'} ({run.config.train.steps} steps)"
                    )
                    ref = remote.remote(run.config, str(run_dir), run.name, threads, self.sharing)
                    running[ref] = (run, Path(run_dir), head)
                while running and status == "completed":
                    done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)  # signals run between waits
                    for ref in done:
                        run, run_dir, head = running.pop(ref)
                        summary = self._result(ref, head, log)
                        if summary is None:
                            status = "interrupted"
                            continue
                        results[run.name] = summary
                        (on_done or (lambda *a: None))(run, head, summary)
                        if summary.status == "interrupted":
                            status = "interrupted"
        except KeyboardInterrupt:
            status = "interrupted"
        finally:
            if running:  # stopped early (a signal, an interrupted run, an error): nothing trains on after compare
                self._cancel(running, log)
        return status, results

    def _result(self, ref, head: str, log) -> RunSummary | None:
        """A finished task's summary; None for a run lost with its node after every retry (kept, resumable)."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the run's own error: never retried
            if isinstance(e.cause, UserError):
                raise UserError(f"{head}: {e.cause}") from None
            raise e.cause from None
        except ray.exceptions.RayError as e:
            log(f"{head}: lost with its node ({type(e).__name__}) after {RETRIES} retries; its folder resumes")
            return None

    def _cancel(self, running: dict, log) -> None:
        ray = self.ray
        refs = list(running)
        # Not a task whose result is already back: Ray 2.60 can abort the driver when a cancel meets a task's
        # completion (a RAY_CHECK in its task manager; ray-project/ray#54260). The window left is the reply in flight.
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in pending:
            ray.cancel(ref)  # queued: never starts; training: saves its checkpoint and writes `interrupted`
        _, left = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_TIMEOUT_S)
        for ref in left:
            ray.cancel(ref, force=True)
        for _run, run_dir, head in running.values():
            status = run_status(run_dir)
            if status is not None:
                log(f"{head}: {status} (cancelled); the same command resumes it")
        running.clear()

    def close(self) -> None:
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None


def reachable(address: str) -> None:
    """One line when nothing answers at a HOST:PORT address (Ray itself would wait for minutes)."""
    target = address.split("://", 1)[-1]
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except ValueError:
        raise UserError(f"--ray-address {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379) or auto") from None
    except OSError as e:
        raise UserError(
            f"no Ray cluster answers at {address} ({e.strerror or e}); start one with `ray start --head` or give "
            "its head's address (--ray-address HOST:PORT, or RAY_ADDRESS)"
        ) from None


def check_folder(ray, out: Path, nodes: list[dict]) -> None:
    """A tiny task on each node: it must see the file this process wrote into `out` (the same folder, not a
    node's own copy) and write and remove one of its own; the nodes must run the same Python and torch."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    mark = f".ray-check-{uuid.uuid4().hex[:12]}"
    (out / mark).write_text("blocklab\n")
    try:
        probe = ray.remote(num_cpus=0, max_retries=0)(folder_probe)
        refs = [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                str(out), mark
            )
            for n in nodes
        ]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
        if len(ready) < len(refs):
            raise UserError(
                f"{len(refs) - len(ready)} node(s) did not answer the check of {out} in {PROBE_TIMEOUT_S} s"
            )
        try:
            answers = ray.get(refs)
        except ray.exceptions.RayTaskError as e:
            raise UserError(f"a node cannot run blocklab's check of {out}: {_first_line(e.cause)}") from None
    finally:
        (out / mark).unlink(missing_ok=True)
    for a in answers:
        if a["error"] or not a["seen"]:
            why = f"cannot write there ({a['error']})" if a["error"] else "does not see this machine's files there"
            raise UserError(
                f"the Ray node on {a['host']} (node {a['node'][:8]}) {why}: --out must be a folder every node "
                "sees and writes (a shared file system)"
            )
    versions = {(a["python"], a["torch"]) for a in answers}
    if len(versions) > 1:
        shown = ", ".join(f"Python {p} with torch {t}" for p, t in sorted(versions))
        raise UserError(f"the Ray nodes run different versions ({shown}): install the same on every node")


def folder_probe(out: str, mark: str) -> dict:
    """On one node (a Ray task): whether it sees `mark` in `out`, and can write and remove a file there."""
    import ray
    import torch

    node = ray.get_runtime_context().get_node_id()
    found = {"node": node, "host": socket.gethostname(), "python": platform.python_version()}
    found.update(torch=torch.__version__, seen=(Path(out) / mark).is_file(), error=None)
    probe = Path(out) / f"{mark}-{node[:12]}"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        found["error"] = e.strerror or str(e)
    return found


def train_task(config, run_dir: str, label: str, threads: int, sharing: dict) -> RunSummary:
    """One run, on the node Ray chose (a Ray task). An earlier attempt's folder (a lost node, an interrupted
    compare) is resumed from its last checkpoint; a run that already finished is returned as it is. `sharing`:
    how many runs each node's machine trains at once (summary.json's concurrent_runs, as compare --jobs's)."""
    import ray
    import torch

    from blocklab.training import train

    path = Path(run_dir)
    status = run_status(path)
    if status in FINISHED:
        return read_summary(path)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # a run's train.threads 0 (auto) takes it, as in a local worker
    if not ray.get_gpu_ids():  # Ray leaves a task that asked no GPU every GPU of its node: it trains on the CPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    torch.set_num_threads(threads)
    node, host = ray.get_runtime_context().get_node_id(), socket.gethostname()

    def log(*parts):  # to the worker's stderr, which Ray shows in compare's terminal
        print(f"  [{label}]", *parts, file=sys.stderr, flush=True)

    log(f"{'resuming' if status else 'training'} on {host} (node {node[:8]})")
    summary = train(config, path, resume=status is not None, progress=False, log=log)
    concurrent = sharing.get(node, sum(sharing.values()) or 1)  # a node that joined later: the cluster's count
    return record_run(path, summary, torch.get_num_threads(), concurrent, launcher="ray", ray_node_id=node, host=host)


def _interrupt(signum, frame):
    """SIGTERM (`kill PID`) stops compare as Ctrl-C does: a KeyboardInterrupt, then the tasks are cancelled."""
    raise KeyboardInterrupt


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
