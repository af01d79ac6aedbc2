"""What `blocklab eval` stores, and how a stored result is found again (hf/evaluation.py runs the harness).

Results go to RUN/eval/results-step-N-TAG.json (TAG: a hash of the tasks and the limit, so evaluations
with other tasks are kept beside each other), written atomically. A stored result is used again only
when everything it depends on is the same: the tasks, the limit, the step and the checkpoint's content
(its manifest's digest), and the versions of blocklab, its task files and lm-eval. Reading one needs no harness
(a report reads them).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
from pathlib import Path

import blocklab
from blocklab.errors import UserError
from blocklab.hf.eval_tasks import PREFIX, SHIPPED, VERSION
from blocklab.training.checkpoint import open_checkpoint

EVAL_DIR = "eval"
# What of the harness's answer is kept: its numbers and how they were made (not the samples, nor the
# environment dump, nor the model object in "config").
KEPT = ("results", "groups", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples")


def parse_tasks(text: str) -> list[str]:
    """Task names from a comma-separated list, each once, sorted (the order does not change a result)."""
    names = sorted({t.strip() for t in text.split(",") if t.strip()})
    if not names:
        raise UserError("--tasks names no task; give lm-eval task names or blocklab's (--tasks list)")
    unknown = [n for n in names if n.startswith(PREFIX) and n not in SHIPPED]
    if unknown:
        raise UserError(f"unknown blocklab task {unknown[0]!r}: blocklab ships {', '.join(SHIPPED)}")
    return names


def checkpoint_of(run: Path, step: int | None) -> tuple[int, str]:
    """(step, digest) of the checkpoint `step` names (default: the latest that verifies). The digest is that
    of its manifest, which lists every file's sha256: it changes whenever the weights do."""
    ckpt = open_checkpoint(run / "checkpoints", step, fallback=True)
    digest = hashlib.sha256((Path(ckpt["path"]) / "manifest.json").read_bytes()).hexdigest()[:16]
    return ckpt["step"], digest


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def settings_of(names: list[str], step: int, limit: int | None, checkpoint: str, lm_eval_version: str) -> dict:
    return {
        "tasks": names,
        "step": step,
        "limit": limit,
        "checkpoint": checkpoint,
        "blocklab_version": blocklab.__version__,
        "task_version": VERSION,
        "lm_eval_version": lm_eval_version,
    }


def results_path(run: Path, settings: dict) -> Path:
    tag = hashlib.sha256(json.dumps([settings["tasks"], settings["limit"]]).encode()).hexdigest()[:8]
    return run / EVAL_DIR / f"results-step-{settings['step']}-{tag}.json"


def stored_result(run: str | Path, tasks: str | list[str], limit: int | None, step: int | None = None) -> dict | None:
    """The stored record of evaluating `run` (its checkpoint of `step`, default the latest) on `tasks` with
    `limit`, when one with exactly these settings exists; None otherwise (nothing is evaluated here)."""
    run = Path(run)
    names = parse_tasks(tasks if isinstance(tasks, str) else ",".join(tasks))
    try:
        step, checkpoint = checkpoint_of(run, step)
    except UserError:
        return None
    try:  # the version the results were made with, read without importing the harness (a report needs none)
        version = importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return None
    settings = settings_of(names, step, limit, checkpoint, version)
    stored = read_json(results_path(run, settings))
    return stored if stored and {k: stored.get(k) for k in settings} == settings else None


def json_safe(value):
    """`value` as JSON: numpy numbers as numbers, tuples as lists, a non-finite float as its name ("nan",
    "inf"), and what JSON cannot hold (functions, objects) left out."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = json_safe(v)
            if v is not _DROP and isinstance(k, (str, int, float, bool)):
                out[str(k)] = v
        return out
    if isinstance(value, (list, tuple)):
        return [v for v in map(json_safe, value) if v is not _DROP]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()  # numpy and torch scalars
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return _DROP


_DROP = object()


def table_rows(record: dict) -> list[tuple[str, str, str, str, str]]:
    """(task, metric, value, stderr, documents) for each metric of each task and group of a stored record."""
    rows = []
    n_samples = record.get("n-samples", {})
    entries = {**record.get("results", {}), **record.get("groups", {})}
    for task, metrics in entries.items():
        n = n_samples.get(task, {}).get("effective", "")
        for key, value in metrics.items():
            metric, _, filt = key.partition(",")
            if not filt or metric.endswith("_stderr"):
                continue  # alias, name, sample_len: not metrics; the stderrs go beside their metric
            err = metrics.get(f"{metric}_stderr,{filt}", "")
            rows.append((task, metric if filt == "none" else key, number(value), number(err), str(n)))
    return rows


def number(value) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
