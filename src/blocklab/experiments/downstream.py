"""A sweep's fine-tuning stage (`finetune` in a preset or SWEEP.toml): after the mlm runs, each is
fine-tuned on every task, once per seed, from its final checkpoint or from checkpoints taken along
pre-training (`steps`, Xiong et al.'s Fig. 4). Results land in DIR/finetune/RUN/[step-N/]TASK/ (a
`blocklab finetune` output each), which the report's downstream section reads.

  [finetune]
  tasks = ["variable-misuse", "wrong-operator"]   # code tasks or classification data
  seeds = [0, 1, 2]
  epochs = 3
  steps = [100, 200, 400]                         # optional: pre-training checkpoints to start from
  "data.max_examples" = 2000                      # optional dotted overrides of the fine-tuning runs
  keep_checkpoints = false                        # the fine-tuned classifiers' checkpoints (default: deleted)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import UserError

FIELDS = {"tasks", "seeds", "epochs", "steps", "keep_checkpoints"}


@dataclass
class FinetuneStage:
    tasks: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])
    epochs: float = 5.0
    steps: list[int] | None = None  # None: each run's final checkpoint
    overrides: dict = field(default_factory=dict)  # {"train": {...}, "data": {...}}
    keep_checkpoints: bool = False  # the fine-tuned classifiers' checkpoints (the table needs none)

    def to_json(self) -> dict:
        flat = {f"{s}.{k}": v for s, values in self.overrides.items() for k, v in values.items()}
        return {
            "tasks": self.tasks,
            "seeds": self.seeds,
            "epochs": self.epochs,
            "steps": self.steps,
            "keep_checkpoints": self.keep_checkpoints,
            **flat,
        }


def _ints(name: str, value, lo: int) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or len(set(value)) != len(value)
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= lo for x in value)
    ):
        raise UserError(f"finetune.{name} = {value!r} is not valid; give a list of distinct integers >= {lo}")
    return list(value)


def parse_stage(spec: dict | None) -> FinetuneStage | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise UserError("finetune must be a table: tasks, seeds, epochs, steps and dotted overrides")
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise UserError(f"finetune.tasks = {tasks!r} is not valid; give a list of task names")
    epochs = spec.get("epochs", 5.0)
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or epochs <= 0:
        raise UserError(f"finetune.epochs = {epochs!r} is not valid; give a positive number")
    overrides: dict = {}
    for key, value in spec.items():
        if key in FIELDS:
            continue
        section, _, name = key.partition(".")
        if section not in ("train", "data", "model") or not name:
            raise UserError(
                f"unknown finetune field {key!r}; valid: {', '.join(sorted(FIELDS))} and dotted train./data. overrides"
            )
        overrides.setdefault(section, {})[name] = value
    steps = _ints("steps", spec["steps"], 1) if spec.get("steps") is not None else None
    keep = spec.get("keep_checkpoints", False)
    if not isinstance(keep, bool):
        raise UserError(f"finetune.keep_checkpoints = {keep!r} is not valid; give true or false")
    return FinetuneStage(list(tasks), _ints("seeds", spec.get("seeds", [0]), 0), float(epochs), steps, overrides, keep)


def stage_dir(out: Path, run: str, task: str, step: int | None) -> Path:
    slug = task.replace("/", "_").replace(":", "_")
    return out / "finetune" / run / (slug if step is None else f"step-{step}/{slug}")


def run_finetunes(stage: FinetuneStage, runs, out: Path, progress=None, log=print) -> dict:
    """Fine-tune every mlm run of the sweep (finished seeds are kept: running the sweep again continues);
    returns {"status", "results": {(run, step, task): finetune.json}}. A checkpoint that pre-training
    never wrote (a run that diverged before it) is recorded as skipped, and the sweep goes on."""
    from blocklab.training.checkpoint import checkpoint_steps
    from blocklab.training.finetune import finetune

    results = {}
    for run in runs:
        run_dir = out / "runs" / run.name
        have = checkpoint_steps(run_dir / "checkpoints")
        for step in stage.steps or [None]:
            for task in stage.tasks:
                where = stage_dir(out, run.name, task, step)
                if (step is None and not have) or (step is not None and step not in have):
                    results[(run.name, step, task)] = _skipped(where, run_dir, task, step, log)
                    continue
                log(f"fine-tuning {run.label}" + (f" at step {step}" if step else "") + f" on {task}")
                result = finetune(
                    run_dir,
                    task,
                    where,
                    stage.seeds,
                    step,
                    stage.epochs,
                    stage.overrides,
                    progress,
                    log,
                    keep_checkpoints=stage.keep_checkpoints,
                    replace_hint=f"delete {where} to fine-tune it again with the sweep's settings",
                )
                results[(run.name, step, task)] = result
                if result["status"] == "interrupted":
                    return {"status": "interrupted", "results": results}
    return {"status": "completed", "results": results}


def _skipped(where: Path, run_dir: Path, task: str, step: int | None, log) -> dict:
    summary = {}
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
    why = f"pre-training {summary.get('status', 'did not finish')}"
    if summary.get("diverged_step"):
        why += f" at step {summary['diverged_step']}"
    reason = f"no checkpoint{'' if step is None else f' of step {step}'}: {why}"
    log(f"not fine-tuning {run_dir.name} on {task}: {reason}")
    result = {
        "task": task,
        "status": "skipped",
        "reason": reason,
        "init_step": step,
        "seeds": [],
        "scores": [],
        "statuses": [],
        "mean": None,
        "sd": None,
        "failed": 0,
        "majority_baseline": None,
    }
    write_atomic(where / "finetune.json", json.dumps(result, indent=2) + "\n")
    return result
