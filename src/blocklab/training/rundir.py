"""The run directory in --out: a new run, --overwrite, or --resume, and what a resume may change.

A resume continues the run that the folder holds; it never makes it another run. Settings that say what
is trained (the model, the data, the optimizer, the schedule) cannot change. train.steps may grow only
where nothing in the learning-rate schedule derives from it (training/optim.py): a linear or cosine decay
ends at train.steps, a default warm-up is 5% of it, and inv_sqrt without an inv_sqrt_scale or a warm-up
holds the rate for 5% of it. Stretching such a schedule would give the steps still to come the rates of
neither the old run nor a new run of that length. A run never shrinks: its trained steps stay its own.

A stored run stands for the run asked for only when its settings are the ones asked for: `changed_settings`
is that comparison for a sweep's stored runs, made by `blocklab compare` before reusing one and by
`blocklab report` before reporting one as the run its sweep planned.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from blocklab.atomic import writable_dir
from blocklab.errors import UserError
from blocklab.training.config import RunConfig, TrainConfig, config_differences, load_config
from blocklab.training.optim import inv_sqrt_scale

# trackers.json, mlflow.db, mlartifacts/ and wandb/: the trackers' run ids and their default stores
# (training/trackers.py); mlruns/: MLflow's file store, the default of earlier versions.
RUN_FILES = (
    "config.toml",
    "metrics.jsonl",
    "summary.json",
    "tokenizer.json",
    "checkpoints",
    "tb",
    "trackers.json",
    "mlflow.db",
    "mlartifacts",
    "mlruns",
    "wandb",
)
# Written beside a finished run by a sweep (experiments/stream_probes.py), read by the report.
STREAM_PROBES = "stream_probes.json"
# Where the numbers are tracked besides metrics.jsonl: never what is trained or its results.
TRACKING = {("train", "trackers"), ("train", "tracker_group"), ("train", "mlflow_uri")}
# Fields that may change when resuming: how long to train, how often to log, where to track, how to fit the
# batch in memory and whether to stop stalled runs, not what to train. train.parallel fixes the checkpoint
# format. train.steps has rules of its own (steps_refusal).
RESUMABLE_CHANGES = {
    ("train", k)
    for k in (
        "steps",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "eval_batches",
        "grad_accum",
        "fsdp_grad_sync",
        "activation_checkpointing",
        "stall_patience",
        "stall_margin",
        "threads",
    )
} | TRACKING

# Fields that change how a run is logged, saved or spread over the cores, never what it trains: a stored run that
# differs only in them is still the run asked for (threads may move a CPU run's last digits, as compare --jobs's
# share of the cores does; summary.json records the count).
NO_EFFECT = {
    ("train", "log_every"),
    ("train", "checkpoint_every"),
    ("train", "keep_checkpoints"),
    ("train", "threads"),
} | TRACKING


def changed_settings(asked: RunConfig, run_dir: Path) -> list[str]:
    """The settings in which the run stored in `run_dir` differs from `asked`, as "train.lr 0.001 -> 0.003"
    (stored -> asked); [] when it is the run asked for."""
    try:
        stored = load_config(Path(run_dir) / "config.toml")
    except UserError as e:
        return [f"an unreadable config ({e})"]
    return [f"{key} {old!r} -> {value!r}" for key, old, value in config_differences(stored, asked, NO_EFFECT)]


def prepare_run_dir(cfg: RunConfig, out: Path, resume: bool, overwrite: bool) -> None:
    """Check `out` for this command before any expensive work and make it ready: UserError (one line
    naming the folder and what to do) where the command would overwrite or change a run it holds."""
    out = Path(out)
    if resume and overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    holds_run = (out / "config.toml").is_file()
    if resume and not holds_run and not out.is_file():
        raise UserError(f"nothing to resume: {out} holds no blocklab run")
    writable_dir(out, "run directory")  # a file in the way, no permission, a full disk
    if holds_run:
        if overwrite:
            discard_run(out)
        elif resume:
            check_resume(load_config(out / "config.toml"), cfg, out)
        else:
            raise UserError(f"{out} already holds a run; pass --resume to continue it or --overwrite to replace it")
    elif any(out.iterdir()):
        raise UserError(f"{out} is not empty and holds no blocklab run; choose another --out")


def discard_run(out: Path) -> None:
    """Remove a run's files from `out` (RUN_FILES; nothing else is there: prepare_run_dir refuses a folder that
    holds anything but a run)."""
    for name in RUN_FILES:
        p = Path(out) / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def check_resume(saved: RunConfig, asked: RunConfig, out: Path) -> None:
    """UserError unless `asked` continues the run whose config is `saved`."""
    why = steps_refusal(saved.train, asked.train.steps)
    # A config file read again gives a default warm-up of the new train.steps: the steps rule says why.
    changed = [
        d for d in config_differences(saved, asked, RESUMABLE_CHANGES) if not (why and d[0] == "train.warmup_steps")
    ]
    for key, old, value in changed[:1]:
        raise UserError(
            f"{out} holds a run with {key}={old!r}, not {value!r}; resume with the same config, or pass "
            f"--overwrite (or another --out) to train a new run"
        )
    if why:
        raise UserError(f"{out}: {why}")


def steps_refusal(saved: TrainConfig, steps: int) -> str | None:
    """Why a run of `saved` cannot go on to train.steps=`steps` (None when it can): a shorter run, or a
    schedule quantity that derives from train.steps. Saved configs hold the warm-up as a number, so a
    warm-up equal to the default 5% of the run's steps counts as the default."""
    n = saved.steps
    if steps == n:
        return None
    fresh = f"pass --overwrite (or another --out) to train a {steps}-step run from step 0"
    if steps < n:
        return (
            f"a resume cannot shorten this {n}-step run to train.steps={steps} (its trained steps stay as they "
            f"are); resume with train.steps={n}, or {fresh}"
        )
    if saved.schedule in ("linear", "cosine"):
        why = f"its {saved.schedule} decay reaches zero at train.steps={n}"
    elif saved.warmup_steps and saved.warmup_steps == _default_warmup(saved, n) != _default_warmup(saved, steps):
        why = (
            f"its warm-up of {saved.warmup_steps} step{'s' * (saved.warmup_steps > 1)} is the default 5% of train.steps={n} (a {steps}-step "
            f"run's is {_default_warmup(saved, steps)})"
        )
    elif saved.schedule == "inv_sqrt" and inv_sqrt_scale(saved) != inv_sqrt_scale(_with_steps(saved, steps)):
        why = (
            f"its inv_sqrt decay starts at 5% of train.steps={n} (train.inv_sqrt_scale is unset and there is "
            f"no warm-up)"
        )
    else:
        return None
    return (
        f"cannot extend this run to train.steps={steps}: {why}, so the steps to come would follow neither "
        f"schedule; {fresh} (only a constant or inv_sqrt schedule with its warm-up set extends)"
    )


def _with_steps(t: TrainConfig, steps: int, **changes) -> TrainConfig:
    return dataclasses.replace(t, steps=steps, **changes)


def _default_warmup(t: TrainConfig, steps: int) -> int:
    """The warm-up that TrainConfig gives a run of `steps` steps that sets none."""
    return _with_steps(t, steps, warmup_steps=None).warmup_steps
