"""Where a run's numbers go besides metrics.jsonl (`train.trackers`): TensorBoard event files, MLflow and W&B.

One interface for each: `start` (the run's flat config as parameters), `log` (a metrics row at its step),
`artifact` (files) and `finish` (the summary and the final status). The training logger calls it on the
writing rank only. MLflow and W&B are optional extras, imported only when a run names them, so that
importing blocklab or training with TensorBoard alone never loads them.

Every tracker gets the same metric names as metrics.jsonl (`loss`, `eval_loss`, `gain/L0.alpha.h0` ...), the
settings that apply to the run as its parameters (settings.applies: no block-only knob of another block), and at
the end the summary and the run's files (RUN_ARTIFACTS; the checkpoints stay in the run directory).

Nothing is sent anywhere the user did not choose: MLflow writes to train.mlflow_uri, else MLFLOW_TRACKING_URI,
else an SQLite store in the run directory (DIR/mlflow.db, artifacts in DIR/mlartifacts; a sweep's runs share one
in the sweep's folder): MLflow 3's own default kind and file name, which its client, CLI and UI read with no
setting (MLflow 3 keeps its file store behind MLFLOW_ALLOW_FILE_STORE, which the user's tools would need too).
W&B runs offline unless the environment configures it (WANDB_MODE, WANDB_API_KEY). DIR/trackers.json keeps each
tracker's run id, so that `--resume` goes on in the same MLflow run and W&B run instead of starting another.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import UserError, import_extra
from blocklab.settings import applicable, show
from blocklab.training.config import SECTIONS, RunConfig, TrainConfig

STATE = "trackers.json"  # in the run directory (a sweep's: in its folder, for the report's run)
EXTRAS = ("mlflow", "wandb")  # the trackers whose package is an optional extra of the same name
# The run's files each tracker gets when the run ends (the README's list).
RUN_ARTIFACTS = ("config.toml", "metrics.jsonl", "summary.json", "tokenizer.json")
MLFLOW_DB, MLFLOW_ARTIFACTS = "mlflow.db", "mlartifacts"  # the default store in the run's (or sweep's) folder
# MLflow's database stores need SQLAlchemy and Alembic (the mlflow extra installs both; mlflow-skinny does not).
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")


def default_store(folder: Path) -> str:
    """The MLflow store in `folder`: sqlite:///FOLDER/mlflow.db (`mlflow ui` run in FOLDER opens it by default)."""
    return f"sqlite:///{(Path(folder) / MLFLOW_DB).resolve()}"


def require(t: TrainConfig) -> None:
    """UserError, in one line naming the package and the extra that installs it, for a tracker whose package is
    missing: before any training, not at its end (nor after half a run directory)."""
    for name in t.trackers:
        if name in EXTRAS:
            import_extra(name, name, f"train.trackers with {name!r}")
    if "mlflow" in t.trackers:
        scheme = (t.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:").split(":")[0].split("+")[0]
        if scheme in DATABASES:
            for package in ("sqlalchemy", "alembic"):
                import_extra(package, "mlflow", f"train.trackers with 'mlflow' and its {scheme} store")


def artifact_root(uri: str) -> str | None:
    """Where the artifacts of a store's new experiments go: beside a SQLite store (MLFLOW_ARTIFACTS); elsewhere
    None, the store's own default (a server's)."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///") :]).parent / MLFLOW_ARTIFACTS).resolve().as_uri()


def open_store(uri: str) -> None:
    """Make the SQLite store `uri` if it does not exist yet, with its artifacts beside it (MLFLOW_ARTIFACTS), before
    any run uses it: MLflow builds a new database through its schema migrations (seconds), which two processes of
    a sweep must not do at once, and gives its Default experiment the artifact folder it is made with."""
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri[len("sqlite:///") :])
    if db.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    with _quiet("mlflow", "alembic"):  # its INFO lines on creating the tables: the run's stderr is for the run
        SqlAlchemyStore(uri, artifact_root(uri))


@contextlib.contextmanager
def _quiet(*loggers: str):
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in loggers]
    for logger, _ in saved:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


@dataclass
class Place:
    """Where a run is tracked: its folder (trackers.json, the default stores), its name, its group (the MLflow
    experiment, the W&B group), the MLflow store (None: MLFLOW_TRACKING_URI, else DIR/mlruns) and its W&B
    job type."""

    dir: Path
    name: str
    group: str
    mlflow_uri: str | None = None
    job: str = "train"


class TensorBoard:
    """DIR/tb: one scalar per metric, tagged with its metrics.jsonl name (as MLflow and W&B name it)."""

    def __init__(self, place: Place):
        self.dir = place.dir / "tb"

    def start(self, params: dict, start: int, saved: dict) -> dict:
        from torch.utils.tensorboard import SummaryWriter  # slow import: only on the writing rank

        # A resumed run drops the events logged after its checkpoint, as metrics.jsonl drops their rows.
        self.writer = SummaryWriter(str(self.dir), purge_step=start + 1 if start else None)
        return {}

    def log(self, values: dict, step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def artifact(self, files: list[Path], name: str) -> None:
        pass  # the event files sit beside the run's own files already

    def finish(self, summary: dict | None, status: str) -> None:
        self.writer.close()


ENDED = ("completed", "diverged", "stalled")  # statuses of a run that stopped by itself, not by a signal or an error


class MLflow:
    """One MLflow run in the experiment named after the group, through MlflowClient (no global active run, so
    a sweep's runs in one process never mix)."""

    def __init__(self, place: Place):
        self.place = place
        self.uri = place.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_store(place.dir)
        if self.uri.startswith("file:"):
            # A file store the user named: MLflow 3 keeps it behind this switch (the README says so); theirs stands.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import_extra("mlflow", "mlflow", "train.trackers with 'mlflow'")
        from mlflow.entities import Metric, Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self.Metric, self.Param, self.Error = Metric, Param, MlflowException
        self.client = MlflowClient

    def start(self, params: dict, start: int, saved: dict) -> dict:
        try:
            open_store(self.uri)
            self.client = self.client(tracking_uri=self.uri)
            return self._start(params, saved)
        # A store that cannot be reached, made, written or used (MLflow's errors, or SQLAlchemy's for a database it
        # cannot open): one line, before any training.
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"MLflow at {self.uri}: {first}") from None

    def _start(self, params: dict, saved: dict) -> dict:
        c, old = self.client, {}
        self.run_id = saved.get("run_id") if saved.get("tracking_uri") == self.uri else None
        if self.run_id is not None:
            try:
                old = c.get_run(self.run_id).data.params
                c.update_run(self.run_id, status="RUNNING")
            except self.Error:  # deleted from the store meanwhile: the run goes on in a new one
                self.run_id = None
        if self.run_id is None:
            exp = c.get_experiment_by_name(self.place.group)
            if exp is None:
                try:
                    c.create_experiment(self.place.group, artifact_root(self.uri))
                except self.Error:  # made meanwhile by a sweep's run in another process (--jobs), or not at all
                    if c.get_experiment_by_name(self.place.group) is None:
                        raise
                exp = c.get_experiment_by_name(self.place.group)
            if exp.lifecycle_stage == "deleted":
                c.restore_experiment(exp.experiment_id)
            exp_id = exp.experiment_id
            tags = {"blocklab.dir": str(self.place.dir.resolve()), "blocklab.job": self.place.job}
            self.run_id = c.create_run(exp_id, run_name=self.place.name, tags=tags).info.run_id
        # A parameter cannot change in MLflow: a resume logs only the new ones (config.toml has the rest).
        new = [self.Param(k, show(v)[:6000]) for k, v in params.items() if k not in old]
        for i in range(0, len(new), 100):  # log_batch takes at most 100 parameters
            c.log_batch(self.run_id, params=new[i : i + 100])
        return {"tracking_uri": self.uri, "run_id": self.run_id}

    def log(self, values: dict, step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self.Metric(k, float(v), now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # and at most 1000 metrics
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def artifact(self, files: list[Path], name: str) -> None:
        for f in files:
            self.client.log_artifact(self.run_id, str(f))

    def finish(self, summary: dict | None, status: str) -> None:
        if summary is not None:
            flat = _flat(summary)
            numbers = {f"summary/{k}": v for k, v in flat.items() if _number(v)}
            self.log(numbers, int(summary.get("step") or 0))
            for k, v in flat.items():
                if not _number(v):
                    self.client.set_tag(self.run_id, f"summary.{k}", show(v)[:5000])
        self.client.set_terminated(
            self.run_id, "FINISHED" if status in ENDED else "KILLED" if status == "interrupted" else "FAILED"
        )


class WandB:
    """One W&B run in the group; offline (files under the run directory, `wandb sync` uploads them later)
    unless WANDB_MODE or WANDB_API_KEY says otherwise."""

    def __init__(self, place: Place):
        self.place = place
        self.wandb = import_extra("wandb", "wandb", "train.trackers with 'wandb'")

    def start(self, params: dict, start: int, saved: dict) -> dict:
        wandb, p = self.wandb, self.place
        configured = os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY")
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT") or "blocklab",
                group=p.group,
                name=p.name,
                job_type=p.job,
                id=saved.get("id"),
                resume="allow" if saved.get("id") else None,
                dir=os.environ.get("WANDB_DIR") or str(p.dir),
                mode=None if configured else "offline",
                # console off: W&B would otherwise wrap stdout and stderr, where the progress bar and the
                # command's results go; create_new: a run of the caller's own stays as it is.
                settings=wandb.Settings(console="off", reinit="create_new"),
            )
        except wandb.Error as e:
            raise UserError(f"W&B: {str(e).splitlines()[0]}") from None
        self.run.config.update(params, allow_val_change=True)  # a resume may change train.steps
        return {"id": self.run.id, "project": self.run.project}

    def log(self, values: dict, step: int) -> None:
        self.run.log(values, step=step, commit=True)  # now, not with the next step: the summary comes last

    def artifact(self, files: list[Path], name: str) -> None:
        art = self.wandb.Artifact(re.sub(r"[^\w.-]", "-", name), type=self.place.job)
        for f in files:
            art.add_file(str(f))
        self.run.log_artifact(art)

    def finish(self, summary: dict | None, status: str) -> None:
        if summary is not None:
            self.run.summary.update(summary)
        self.run.finish(exit_code=0 if status in ENDED else 1)


KINDS = {"tensorboard": TensorBoard, "mlflow": MLflow, "wandb": WandB}


class Trackers:
    """A run's trackers, started in `train.trackers` order; their ids kept in DIR/trackers.json."""

    def __init__(self, names: list[str], place: Place, params: dict, start: int = 0):
        self.place = place
        path = place.dir / STATE
        saved = _read(path)
        self.items: list = []
        try:
            for name in names:
                tracker = KINDS[name](place)
                saved[name] = tracker.start(params, start, saved.get(name) or {}) or saved.get(name)
                self.items.append(tracker)
        except BaseException:
            self.finish(None)  # the ones already started end as failed
            raise
        finally:  # the ids of those started, even if another failed: the same command goes on in them
            if any(saved.get(name) for name in names):
                write_atomic(path, json.dumps({k: v for k, v in saved.items() if v}, indent=2) + "\n")

    def log(self, row: dict) -> None:
        """The row to every tracker. One that fails (a tracking server gone, a full disk) is said once on stderr
        and dropped: metrics.jsonl keeps every row, and hours of training are not lost to a tracker."""
        values = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        for tracker in list(self.items):
            try:
                tracker.log(values, row["step"])
            except Exception as e:
                self._drop(tracker, f"logging step {row['step']}", e)

    def _drop(self, tracker, what: str, e: Exception) -> None:
        self.items.remove(tracker)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(
            f"warning: {type(tracker).__name__} failed {what} ({first}); it is left out for the rest of this run, "
            f"metrics.jsonl has every row",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(Exception):
            tracker.finish(None, "failed")

    def finish(self, summary: dict | None, files: list[Path] = (), name: str = "") -> None:
        """The summary (None: the run failed), then `files` as one artifact, then each run's end. A tracker that
        fails here is said once and left: the run and its summary.json are already complete. A failed run's
        trackers are closed quietly: the error that stopped the run is the one to see."""
        status = summary.get("status", "completed") if summary is not None else "failed"
        for tracker in list(self.items):
            try:
                if files:
                    tracker.artifact([f for f in files if f.is_file()], name or self.place.name)
                tracker.finish(summary, status)
            except Exception as e:
                if summary is not None:
                    self._drop(tracker, "recording the summary", e)
        self.items = []


def open_trackers(cfg: RunConfig, out: Path, start: int) -> Trackers:
    """The trackers of a run in `out`, started at update `start` (a resume: the checkpoint's step)."""
    out = Path(out)
    name = out.resolve().name
    place = Place(out, name, cfg.train.tracker_group or name, cfg.train.mlflow_uri)
    settings = applicable(SECTIONS, cfg.to_dict())  # config.toml keeps every setting; the trackers, those that apply
    params = {f"{section}.{k}": v for section, values in settings.items() for k, v in values.items()}
    return Trackers(list(cfg.train.trackers), place, params, start)


def track_report(out: Path, group: str, configs: list[RunConfig], files: list[Path]) -> list[str]:
    """Log a sweep's report files to the trackers its runs used besides TensorBoard: a run named "report"
    in the sweep's MLflow experiment (in the runs' store) and W&B group. Returns the trackers it logged to."""
    used = [n for n in ("mlflow", "wandb") if any(n in c.train.trackers for c in configs)]
    if not used:
        return []
    t = next(c.train for c in configs if used[0] in c.train.trackers)
    uri = next((c.train.mlflow_uri for c in configs if "mlflow" in c.train.trackers), None)
    place = Place(Path(out), "report", t.tracker_group or group, uri or _sweep_store(out), job="report")
    trackers = Trackers(used, place, {})
    trackers.finish({"status": "completed"}, files, f"{place.group}-report")
    return used


def _sweep_store(out: Path) -> str | None:
    """A sweep's MLflow store when its runs set none: the user's, else the SQLite store in its folder."""
    return None if os.environ.get("MLFLOW_TRACKING_URI") else default_store(out)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or damaged: the trackers start new runs
        return {}
    return data if isinstance(data, dict) else {}


def _flat(d: dict, prefix: str = "") -> dict:
    """{'machine': {'cpu': 'x'}} -> {'machine.cpu': 'x'}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
