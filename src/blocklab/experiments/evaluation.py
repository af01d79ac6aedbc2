"""A sweep's evaluation stage (`eval` in a preset or SWEEP.toml): after the clm runs, each final run that
completed is scored by the lm-eval harness on its exported model (`blocklab eval`, hf/evaluation.py), and
the verdicts compare the groups on the chosen metrics as they do on the loss (secondary metrics: Welch
against the reference, in the sweep's Holm family).

  [eval]
  tasks = ["blocklab_val_bpb", "blocklab_wrong_operator"]   # lm-eval names or blocklab's (blocklab eval --tasks list)
  limit = 200                                               # optional: documents per task at most
  metrics = ["blocklab_val_bpb/bits_per_byte"]              # optional: TASK/METRIC; default one per task

Results stay in each run's RUN/eval/ (reused while the run, its checkpoint and these settings are the same).
A run that did not complete is not evaluated and has no score: its group counts one seed fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from blocklab.errors import ConfigError, UserError
from blocklab.run_summary import read_summary
from blocklab.settings import setting, validate

# The metric a task is scored on when the stage names none: bits per byte for a perplexity task, accuracy
# for a multiple-choice one, else the first the harness reports.
PREFERRED = ("bits_per_byte", "acc", "exact_match", "f1")


@dataclass
class EvalStage:
    tasks: list[str] = setting(
        help="the lm-eval tasks each completed final run is evaluated on (blocklab eval --tasks list)", nonempty=True
    )
    limit: int | None = setting(None, help="documents per task at most", derived="every document", min=1)
    metrics: list[str] | None = setting(
        None,
        help="TASK/METRIC pairs the verdicts compare",
        derived="per task: bits_per_byte, else acc, else its first metric",
        nonempty=True,
        distinct=True,
    )
    batch_size: int = setting(8, help="the harness's batch size", min=1)

    def __post_init__(self) -> None:
        validate(self, "eval")
        for m in self.metrics or []:
            task, _, metric = m.partition("/")
            if task not in self.tasks or not metric:
                raise ConfigError(f"eval.metrics entry {m!r} is not TASK/METRIC with TASK one of eval.tasks")

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def parse_eval(spec: dict | None) -> EvalStage | None:
    if spec is None:
        return None
    names = [f.name for f in fields(EvalStage)]
    if not isinstance(spec, dict):
        raise UserError(f"eval must be a table: tasks (and optionally {', '.join(names[1:])})")
    unknown = sorted(set(spec) - set(names))
    if unknown:
        raise UserError(f"unknown eval field {unknown[0]!r}; valid: {', '.join(names)}")
    if "tasks" not in spec:
        raise UserError("eval.tasks is missing; give a list of lm-eval or blocklab task names")
    return EvalStage(**spec)


def _evaluate():
    from blocklab.errors import import_extra

    import_extra("lm_eval", "eval", "a sweep's [eval] stage")
    from blocklab.hf import evaluation

    return evaluation


def run_evals(stage: EvalStage, finals, out: Path, log=print) -> dict:
    """Evaluate every completed final run; {run name: stored record}. A run evaluated earlier with these
    settings is read back, not evaluated again."""
    evaluation = _evaluate()
    records = {}
    for i, run in enumerate(finals, 1):
        run_dir = out / "runs" / run.name
        summary = read_summary(run_dir)
        if summary is None:
            continue
        if summary.status != "completed":
            log(f"[eval {i}/{len(finals)}] {run.label}: {summary.status}, not evaluated")
            continue
        record = evaluation.evaluate(run_dir, stage.tasks, limit=stage.limit, batch_size=stage.batch_size, log=log)
        log(f"[eval {i}/{len(finals)}] {run.label}: {'stored result' if record['reused'] else 'evaluated'}")
        records[run.name] = record
    return records


def chosen_metrics(stage: EvalStage, record: dict) -> list[tuple[str, str]]:
    """(task, metric) pairs the verdicts compare: the stage's, or one per task (PREFERRED)."""
    if stage.metrics:
        return [tuple(m.split("/", 1)) for m in stage.metrics]
    out = []
    for task in stage.tasks:
        reported = [k.partition(",")[0] for k in (record.get("results", {}).get(task) or {}) if "," in k]
        reported = [m for m in reported if not m.endswith("_stderr")]
        best = next((m for m in PREFERRED if m in reported), reported[0] if reported else None)
        if best is not None:
            out.append((task, best))
    return out


def metric_value(record: dict | None, task: str, metric: str) -> float | None:
    """The harness's value of `metric` on `task` (its "none" filter, or the first filter it reports)."""
    values = ((record or {}).get("results") or {}).get(task) or {}
    found = [
        (filt != "none", float(value))
        for key, value in values.items()
        for name, _, filt in [key.partition(",")]
        if name == metric and isinstance(value, (int, float)) and math.isfinite(value)
    ]
    return min(found, key=lambda f: f[0])[1] if found else None


def lower_is_better(record: dict, task: str, metric: str) -> bool:
    higher = ((record.get("higher_is_better") or {}).get(task) or {}).get(metric)
    return higher is False


def stored_records(stage: EvalStage, out: Path, runs) -> dict:
    """{run name: record} of the runs' stored evaluations with the stage's settings (None where there is none;
    all None where the hf extra is not installed: nothing was evaluated here)."""
    try:
        from blocklab.hf import eval_store
    except ModuleNotFoundError:
        return {r.name: None for r in runs}
    return {r.name: eval_store.stored_result(out / "runs" / r.name, stage.tasks, stage.limit) for r in runs}
