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
from dataclasses import dataclass, fields
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import ConfigError, UserError
from blocklab.run_summary import read_summary
from blocklab.settings import setting, validate

SECTIONS = ("train", "data", "model")  # the sections a stage's dotted overrides may set


@dataclass
class FinetuneStage:
    tasks: list[str] = setting(
        help="the tasks each run is fine-tuned on: code tasks or classification data", nonempty=True
    )
    seeds: list[int] = setting(
        default_factory=lambda: [0], help="fine-tuning seeds, one fine-tune each", min=0, nonempty=True, distinct=True
    )
    epochs: float = setting(
        5.0, help="passes over each task's training split", unit="epochs", min=0, min_exclusive=True
    )
    steps: list[int] | None = setting(
        None,
        help="pre-training checkpoints to start from (pre-training must keep them: train.keep_checkpoints = 0)",
        derived="each run's final checkpoint",
        min=1,
        nonempty=True,
        distinct=True,
    )
    overrides: dict = setting(
        default_factory=dict,
        help='dotted train./data./model. settings of the fine-tuning runs ("data.max_examples" = 2000)',
        expected="a table of sections ({'train': {'lr': 0.001}})",
    )
    keep_checkpoints: bool = setting(False, help="keep the fine-tuned classifiers' checkpoints (the table needs none)")

    def __post_init__(self) -> None:
        validate(self, "finetune")
        for section, values in self.overrides.items():
            if section not in SECTIONS or not isinstance(values, dict):
                raise ConfigError(
                    f"finetune.overrides={self.overrides!r} is not valid; it must map each of {', '.join(SECTIONS)} "
                    "to its settings"
                )
        self.epochs = float(self.epochs)

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


# The [finetune] table's own keys; every other key is a dotted override.
FIELDS = tuple(f.name for f in fields(FinetuneStage) if f.name != "overrides")


def parse_stage(spec: dict | None) -> FinetuneStage | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"finetune must be a table: {', '.join(FIELDS)} and dotted overrides")
    own: dict = {}
    overrides: dict = {}
    for key, value in spec.items():
        if key in FIELDS:
            own[key] = value
            continue
        section, _, name = key.partition(".")
        if section not in SECTIONS or not name:
            raise UserError(
                f"unknown finetune field {key!r}; valid: {', '.join(sorted(FIELDS))} and dotted train./data. overrides"
            )
        overrides.setdefault(section, {})[name] = value
    if "tasks" not in own:
        raise UserError("finetune.tasks is missing; give a list of task names")
    return FinetuneStage(**own, overrides=overrides)


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
    summary = read_summary(run_dir)
    why = f"pre-training {summary.status if summary else 'did not finish'}"
    if summary and summary.diverged_step:
        why += f" at step {summary.diverged_step}"
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
