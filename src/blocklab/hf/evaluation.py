"""`blocklab eval`: lm-eval's tasks, and the offline ones blocklab ships (hf/eval_tasks.py), on a clm run's
exported model.

What the harness scores is the exported folder, loaded by `transformers` (HFLM on the path), not blocklab's
module handed over in process: the point is to measure the artefact a user would publish. The export is
kept in the run directory (RUN/hf-export/step-N) and used again while it is the same checkpoint's.

The jobs around it have modules of their own: what is stored and when a stored result is used again
(hf/eval_store.py), and running the harness offline and quietly (hf/harness.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

import blocklab
from blocklab.atomic import write_atomic
from blocklab.data.tokenizer import load_tokenizer
from blocklab.errors import UserError, import_extra
from blocklab.hf.eval_store import (
    EVAL_DIR,
    KEPT,
    checkpoint_of,
    json_safe,
    parse_tasks,
    read_json,
    results_path,
    settings_of,
)
from blocklab.hf.eval_tasks import SHIPPED, Window, quiet, write_tasks
from blocklab.hf.harness import Truncations, harness_tasks, hub_offline, no_progress_bars
from blocklab.training.config import load_config

EXPORT_DIR = "hf-export"


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
