"""Fine-tuning (`blocklab finetune`): the encoder of an mlm run, a fresh classification head, the usual
BERT recipe, one run directory per seed and their mean ± sd (docs/cli.md#finetune).

The recipe (FINETUNE_TRAIN): AdamW, lr 1e-4 with 10% warm-up and linear decay, batch 32, weight
decay 0.01, 5 epochs (He & Hofmann fine-tune 5 epochs), evaluation after every epoch, the final
epoch's score reported (no selection on the validation split). Divergence: a non-finite loss, or a
loss 10x the first one; the run ends `diverged`, as SAS-P without norm did in He & Hofmann's GLUE runs.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

from blocklab.atomic import writable_dir, write_atomic
from blocklab.errors import UserError
from blocklab.run_summary import RunSummary, read_summary
from blocklab.training.checkpoint import checkpoint_steps, open_checkpoint
from blocklab.training.config import RunConfig, config_differences, load_config
from blocklab.training.finetune_recipe import EPOCHS, FINETUNE_TRAIN, WARMUP
from blocklab.training.pretrained import pretraining_run
from blocklab.training.tasks.classification import load_data
from blocklab.training.trainer import RESUMABLE_CHANGES, prepare_run_dir, train


def finetune_config(
    run: str | Path,
    task: str,
    seed: int,
    overrides: dict | None = None,
    n_train: int | None = None,
    n_labels: int = 2,
    epochs: float = EPOCHS,
    step: int | None = None,
) -> RunConfig:
    """The RunConfig of one fine-tuning run: the mlm run's model as a classifier, FINETUNE_TRAIN, then
    `overrides` ({"train": {...}, ...}); `n_train` examples give the steps of `epochs` epochs. The
    checkpoint is named by its step (step None: the latest), so the config says which one it was."""
    pre = pretraining_run(run)
    if step is None:
        steps = checkpoint_steps(pre.path / "checkpoints")
        if not steps:
            raise UserError(f"{pre.path} has no checkpoint to fine-tune from")
        step = steps[-1]
    over = {k: dict(v) for k, v in (overrides or {}).items()}
    model = {**pre.cfg.model.to_dict(), "task": "classification", "n_labels": n_labels, **over.pop("model", {})}
    data = {
        "source": task,
        "vocab_size": pre.data.vocab_size,
        "seq_len": pre.cfg.model.max_seq_len,
        "cache_dir": pre.data.cache_dir,
        **over.pop("data", {}),
    }
    train = {
        **FINETUNE_TRAIN,
        "seed": seed,
        "init_from": str(pre.path),
        "init_step": step,
        "precision": pre.cfg.train.precision,
        "device": pre.cfg.train.device,
        **over.pop("train", {}),
    }
    if over:
        raise UserError(f"unknown config section [{next(iter(over))}]")
    if n_train is not None and "steps" not in train:
        per_epoch = max(1, math.ceil(n_train / train["batch_size"]))
        train["steps"] = max(1, math.ceil(epochs * per_epoch))
        train.setdefault("warmup_steps", int(round(WARMUP * train["steps"])))
        train.setdefault("eval_every", per_epoch)
        train.setdefault("log_every", max(1, per_epoch // 5))
        train.setdefault("checkpoint_every", train["steps"])
    return RunConfig.from_dict({"model": model, "data": data, "train": train})


def count_examples(run: str | Path, task: str, overrides: dict | None, log, step: int | None = None) -> tuple[int, int]:
    """(training examples the model will see, number of labels) of `task` under the run's tokenizer."""
    data = load_data(finetune_config(run, task, 0, overrides, step=step), log)
    return len(data.train.ids), data.labelled.n_labels


def aggregate(seeds: list[int], summaries: list[RunSummary]) -> dict:
    """Mean ± sd of the final score over the seeds that did not diverge, and the failures."""
    ok = [
        s.final_score
        for s in summaries
        if s.status == "completed" and s.final_score is not None and math.isfinite(s.final_score)
    ]
    return {
        "seeds": list(seeds),
        "scores": [s.final_score for s in summaries],
        "statuses": [s.status for s in summaries],
        "mean": statistics.fmean(ok) if ok else None,
        "sd": statistics.stdev(ok) if len(ok) > 1 else None,  # one surviving seed: no spread to give
        "failed": sum(s.status == "diverged" for s in summaries),
    }


def finetune(
    run: str | Path,
    task: str,
    out: str | Path,
    seeds=(0,),
    step: int | None = None,
    epochs: float = EPOCHS,
    overrides: dict | None = None,
    progress: bool | None = None,
    log=print,
    keep_checkpoints: bool = True,
    overwrite: bool = False,
    replace_hint: str = "pass --overwrite to fine-tune it again, or choose another --out",
) -> dict:
    """Fine-tune the mlm run `run` on `task` once per seed into out/seed-N; out/finetune.json holds the
    per-seed results and their mean ± sd. Finished seeds are kept (if their config is this one; another
    one is refused with `replace_hint`, what the caller offers instead); an interrupted one resumes.
    `overwrite`: every seed is fine-tuned afresh. keep_checkpoints False: a finished seed's checkpoints
    are deleted (a sweep of 90 fine-tuning runs of a 120M encoder would keep 150 GB for a table of scores)."""
    out = Path(out)
    if not seeds:
        raise UserError("no fine-tuning seeds given")
    pre = pretraining_run(run)
    root = pre.path / "checkpoints"
    steps = checkpoint_steps(root)
    if step is not None and step not in steps:  # before the data is built: a typo fails at once
        raise UserError(f"{root} has no checkpoint of step {step}; it has: {', '.join(map(str, steps)) or 'none'}")
    writable_dir(out)  # a file in the way, no permission, a full disk: before the data is built
    if step is None:  # the newest that verifies, named once for every seed's config
        step = open_checkpoint(root, fallback=True)["step"]
    n_train, n_labels = count_examples(run, task, overrides, log, step)
    done_seeds, summaries = [], []
    for seed in seeds:
        cfg = finetune_config(run, task, seed, overrides, n_train, n_labels, epochs, step)
        run_dir = out / f"seed-{seed}"
        if not overwrite:
            _refuse_other_settings(cfg, run_dir, replace_hint)
        done = None if overwrite else read_summary(run_dir)
        if done and done.status in ("completed", "diverged"):
            prepare_run_dir(cfg, run_dir, resume=True, overwrite=False)
            log(f"seed {seed}: {done.status} earlier, kept")
            done_seeds.append(seed)
            summaries.append(done)
            continue
        log(f"fine-tuning {pre.path.name} on {task}, seed {seed}: {cfg.train.steps} steps")
        holds_run = (run_dir / "config.toml").is_file()
        s = train(cfg, run_dir, resume=holds_run and not overwrite, overwrite=overwrite, progress=progress, log=log)
        done_seeds.append(seed)
        summaries.append(s)
        if s.status == "interrupted":
            break
        if not keep_checkpoints:
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        log(
            f"seed {seed}: {s.status}, {s.metric} {_fmt(s.final_score)} (majority baseline {_fmt(s.majority_baseline)})"
        )
    first = summaries[0]
    result = {
        "run": str(pre.path),
        "task": task,
        "init_step": cfg.train.init_step,
        "epochs": epochs,
        "metric": first.metric,
        "n_train": first.n_train,
        "n_val": first.n_val,
        "majority_baseline": first.majority_baseline,
        "block": first.block,
        "status": "interrupted" if any(s.status == "interrupted" for s in summaries) else "completed",
        **aggregate(done_seeds, summaries),
    }
    write_atomic(out / "finetune.json", json.dumps(result, indent=2) + "\n")
    return result


def _refuse_other_settings(cfg: RunConfig, run_dir: Path, hint: str) -> None:
    """A seed's folder that holds a fine-tuning with other settings is never continued as this one.
    train.steps counts here: it follows from the epochs and the data, so another one is another recipe."""
    if not (run_dir / "config.toml").is_file():
        return
    ignored = RESUMABLE_CHANGES - {("train", "steps")}
    diff = config_differences(load_config(run_dir / "config.toml"), cfg, ignored)
    if diff:
        shown = ", ".join(f"{key} {old!r} -> {new!r}" for key, old, new in diff[:3]) + (", ..." if diff[3:] else "")
        raise UserError(f"{run_dir} holds a fine-tuning with other settings ({shown}); {hint}")


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"
