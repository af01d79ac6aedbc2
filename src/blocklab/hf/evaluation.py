"""`blocklab eval`: lm-eval's tasks, and the offline ones blocklab ships (hf/eval_tasks.py), on a clm run's
exported model.

What the harness scores is the exported folder, loaded by `transformers` (HFLM on the path), not blocklab's
module handed over in process: the point is to measure the artefact a user would publish. The export is
kept in the run directory (RUN/hf-export/step-N) and used again while it is the same checkpoint's.

Results go to RUN/eval/results-step-N-TAG.json (TAG: a hash of the tasks and the limit, so evaluations
with other tasks are kept beside each other), written atomically. A stored result is used again only
when everything it depends on is the same: the tasks, the limit, the step and the checkpoint's content
(its manifest's digest), and the versions of blocklab, its task files and lm-eval.

No network: the harness runs with the Hugging Face hub offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE), so
a harness task runs when its data is in the local cache, and otherwise fails with one line naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch

import blocklab
from blocklab.atomic import write_atomic
from blocklab.data.tokenizer import load_tokenizer
from blocklab.errors import UserError, import_extra
from blocklab.hf.eval_tasks import PREFIX, SHIPPED, VERSION, Window, quiet, write_tasks
from blocklab.training.checkpoint import open_checkpoint
from blocklab.training.config import load_config

EXPORT_DIR = "hf-export"
EVAL_DIR = "eval"
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
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


def exported(run: Path, step: int, checkpoint: str, log: Callable) -> Path:
    """RUN/hf-export/step-N: the export of that checkpoint, made again unless the folder there was exported
    from it (same step, same checkpoint digest, same blocklab version and model code)."""
    from blocklab.hf.export import code_digest, export_run

    out = run / EXPORT_DIR / f"step-{step}"
    marker = run / EXPORT_DIR / f"step-{step}.json"  # which checkpoint the folder was exported from
    info, mark = read_json(out / "blocklab_export.json"), read_json(marker)
    if (
        info.get("step") == step
        and info.get("blocklab_version") == blocklab.__version__
        and info.get("code") == code_digest()
        and mark.get("checkpoint") == checkpoint
    ):
        return out
    log(f"exporting the checkpoint of step {step} to {out}")
    export_run(run, out, step, overwrite=True)
    write_atomic(marker, json.dumps({"step": step, "checkpoint": checkpoint}) + "\n")
    return out


@contextlib.contextmanager
def hub_offline():
    """The Hugging Face hub offline while the harness runs. The environment variables reach the libraries
    imported from here on; huggingface_hub and datasets read them once, at import, so if they were imported
    before (another evaluation, a notebook) their flags are set too, and everything is restored after."""
    saved_env = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update(dict.fromkeys(OFFLINE_ENV, "1"))
    import datasets.config
    import huggingface_hub.constants

    flags = [(huggingface_hub.constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE")]
    flags.append((datasets.config, "HF_DATASETS_OFFLINE"))
    saved = [(mod, attr, getattr(mod, attr)) for mod, attr in flags]
    for mod, attr, _ in saved:
        setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in saved:
            setattr(mod, attr, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


class Truncations(logging.Filter):
    """Counts, and keeps off the log, HFLM's warning for each request whose context it cuts from the left to
    fit the window: blocklab's code tasks have long contexts by design, and one line per request buried
    everything else. evaluate() says the count once instead."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Combined length of context"):
            self.count += 1
            return False
        return True


def harness_tasks(manager, names: list[str]) -> list[tuple[str, list]]:
    """(name, the harness's Task and Group objects) for each of `names` (a tag: its tasks), loaded one name at a
    time so that a failure (data neither on disk nor downloadable offline, a broken config) is one line naming
    the task."""
    objects = []
    for name in names:
        if name not in manager.all_tasks and not Path(name).is_file():
            raise UserError(
                f"unknown task {name!r}: neither one of blocklab's ({', '.join(SHIPPED)}) nor one lm-eval "
                "knows (lm-eval ls tasks lists them), nor a task config file (.yaml)"
            )
        try:
            loaded = manager.load(name)
        except Exception as e:  # the harness and datasets raise anything from KeyError to ConnectionError
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            hint = "; blocklab eval runs offline: put the task's data in the Hugging Face cache first"
            offline = isinstance(e, (ConnectionError, OSError)) or "offline" in reason.lower()
            raise UserError(f"lm-eval task {name!r} cannot be loaded: {reason}{hint if offline else ''}") from None
        if name in loaded["groups"]:
            objects.append((name, [loaded["groups"][name]]))
        elif name in loaded["tasks"]:
            objects.append((name, [loaded["tasks"][name]]))
        else:  # a tag, or a task config file: the tasks it names
            objects.append((name, list(loaded["groups"].values()) or list(loaded["tasks"].values())))
    return objects


@contextlib.contextmanager
def no_progress_bars():
    """The harness, datasets and transformers without their progress bars (a bar per batch of requests: about
    twenty per task), their tokenizer's long-input warning (the harness cuts long contexts itself; evaluate() says
    how often), and the harness's `git describe` of whatever folder the user stands in (its hash means nothing
    for the run, and outside a repository git prints 'fatal: not a git repository'). evaluate() says one line per
    task instead. Every bar is a tqdm (datasets' and transformers' subclass it), so tqdm's own default is set."""
    import lm_eval.evaluator
    import tqdm.std
    from transformers.utils import logging as hf_logging

    original, verbosity = tqdm.std.tqdm.__init__, hf_logging.get_verbosity()

    def silent(self, *args, **kwargs):
        kwargs["disable"] = True
        original(self, *args, **kwargs)

    tqdm.std.tqdm.__init__ = silent
    hf_logging.set_verbosity_error()
    try:
        with mock.patch.object(lm_eval.evaluator, "get_git_commit_hash", lambda: None):
            yield
    finally:
        tqdm.std.tqdm.__init__ = original
        hf_logging.set_verbosity(verbosity)


def evaluate(
    run: str | Path,
    tasks: str | list[str],
    step: int | None = None,
    limit: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    log: Callable = quiet,
) -> dict:
    """Evaluate the clm run `run` (its checkpoint of `step`, default the latest) on `tasks` (lm-eval names
    and blocklab's, a list or comma-separated) with at most `limit` documents each. Returns the stored
    record (settings, the harness's results, the shipped tasks' counts) with "path" (its file) and "reused"
    (True when a stored result with these settings was read instead)."""
    run = Path(run)
    names = parse_tasks(tasks if isinstance(tasks, str) else ",".join(tasks))
    if limit is not None and limit < 1:
        raise UserError(f"--limit {limit} is not valid; give a number of documents (>= 1)")
    if not (run / "config.toml").is_file():
        raise UserError(f"{run} holds no blocklab run (no config.toml)")
    cfg = load_config(run / "config.toml")
    if cfg.model.task != "clm":
        what = "blocklab's tasks (" + ", ".join(n for n in names if n in SHIPPED) + ")"
        if not any(n in SHIPPED for n in names):
            what = "lm-eval's tasks"
        raise UserError(f"{run} is a {cfg.model.task} run; {what} score causal language models: evaluate a clm run")
    if not (run / "tokenizer.json").is_file():
        raise UserError(f"{run} has no tokenizer.json")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: this machine has no CUDA device torch can use; evaluate with --device cpu")
    lm_eval = import_extra("lm_eval", "eval", "blocklab eval")
    step, checkpoint = checkpoint_of(run, step)
    settings = settings_of(names, step, limit, checkpoint, lm_eval.__version__)
    path = results_path(run, settings)
    stored = read_json(path)
    if stored and {k: stored.get(k) for k in settings} == settings:
        return dict(stored, path=str(path), reused=True)

    with hub_offline(), no_progress_bars():
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager

        import blocklab.hf  # noqa: F401  (registers the Auto classes the exported folder names)

        shipped = [n for n in names if n in SHIPPED]
        folder = run / EVAL_DIR / "tasks"
        window = Window(load_tokenizer(run / "tokenizer.json"), cfg.model.max_seq_len)
        if shipped:
            log(f"writing {', '.join(shipped)} into {folder}")
        infos = write_tasks(folder, shipped, cfg.data, window, log)
        # The harness's own index of its tasks takes seconds to build: only when one of them is asked for.
        manager = TaskManager(include_path=str(folder), include_defaults=len(shipped) < len(names))
        objects = harness_tasks(manager, names)
        model_dir = exported(run, step, checkpoint, log)
        log(f"evaluating {model_dir} on {', '.join(names)}" + (f" ({limit} documents each at most)" if limit else ""))
        lm = HFLM(pretrained=str(model_dir), backend="causal", batch_size=batch_size, device=device)
        t0 = time.perf_counter()
        truncations, hf_log = Truncations(), logging.getLogger(HFLM.__module__)
        hf_log.addFilter(truncations)
        out: dict = {key: {} for key in KEPT}
        try:
            for i, (name, task_objects) in enumerate(objects, 1):  # one at a time: a line for each
                t1 = time.perf_counter()
                part = simple_evaluate(
                    model=lm, tasks=task_objects, task_manager=manager, limit=limit, log_samples=False
                )
                for key in KEPT:
                    out[key].update(part.get(key) or {})
                docs = sum(n.get("effective", 0) for n in (part.get("n-samples") or {}).values())
                log(
                    f"[{i}/{len(objects)}] {name}: {docs:,} document{'s' * (docs != 1)} in {time.perf_counter() - t1:.1f} s"
                )
        finally:
            hf_log.removeFilter(truncations)
    if truncations.count:
        log(
            f"{truncations.count:,} requests were longer than the model's {cfg.model.max_seq_len}-token window: "
            "the harness cut their contexts from the left"
        )
    record = {
        **settings,
        **json_safe({k: out[k] for k in KEPT if k in out}),
        "blocklab_tasks": infos,
        "export": str(model_dir),
        "seconds": round(time.perf_counter() - t0, 3),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_atomic(path, json.dumps(record, indent=2) + "\n")
    return dict(record, path=str(path), reused=False)


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
