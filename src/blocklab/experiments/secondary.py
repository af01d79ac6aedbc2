"""Secondary metrics of a sweep's verdicts (docs/verdicts.md): what a group is for beyond its pre-training loss.
Each forms a family of its own; a run's outcome on it is `completed` with its score, or failed.

- `final_bleu`: a translation run's BLEU at the end of its schedule (higher is better; the cap is 0 BLEU: a
  run whose training failed, or that ends at 0 BLEU, failed on it).
- `eval:TASK/METRIC`: an evaluation stage's harness score (experiments/evaluation.py) of each completed
  final run on its exported model; lower or higher is better as the harness says (bits per byte: lower).
- `finetune:TASK`: a fine-tuning stage's dev score on TASK, one score per pre-training seed: the mean
  over that run's completed fine-tuning seeds, from its final checkpoint (or the latest of the stage's
  `steps`). The cap is the task's majority-class score: a run whose pre-training failed, or whose fine-tunes
  all failed or ended at or below the majority class, failed on it.

The best tuned value is chosen on the primary metric only; these metrics are scored at it and compared with
the reference seed by seed, as the primary metric is.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from blocklab.experiments.downstream import stage_dir
from blocklab.experiments.sweep import RunSpec, Sweep
from blocklab.run_summary import RunSummary

BLEU = "final_bleu"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _record(runs: list[RunSpec], summaries, values) -> dict:
    """{"seeds", "statuses", "raw"}: a run's status is its training status (so a failed pre-training fails this
    metric too), `missing` where it has no value yet; judge classifies the rest against the cap."""
    statuses, raw = [], []
    for s, v in zip(summaries, values):
        status = s.status if s is not None else "missing"
        statuses.append(status if status not in ("completed", "plateau") or _finite(v) else "missing")
        raw.append(float(v) if _finite(v) else None)
    return {"seeds": [r.seed for r in runs], "statuses": statuses, "raw": raw}


def finetune_value(result: dict | None) -> float | None:
    """One pre-training run's score on a task: the mean over its completed fine-tuning seeds (None when none
    completed: the run fails the task, as one at or below the majority class does)."""
    if not result:
        return None
    ok = [
        s
        for s, status in zip(result.get("scores") or [], result.get("statuses") or [])
        if status == "completed" and _finite(s)
    ]
    return statistics.fmean(ok) if ok else None


def _finetune_status(result: dict | None, summary: RunSummary | None) -> str:
    if result is None or (result.get("status") == "interrupted" and not result.get("scores")):
        return "missing"
    if summary is not None and summary.status not in ("completed", "missing"):
        return summary.status
    return "completed" if finetune_value(result) is not None else "plateau"


def eval_metrics(stage, out: Path, finals_by_group: dict[str, list[RunSpec]], summaries) -> dict:
    """`eval:TASK/METRIC` entries: the harness's value on each final run's stored evaluation (no cap: a run
    that did not complete was not evaluated and has no score)."""
    from blocklab.experiments.evaluation import chosen_metrics, lower_is_better, metric_value, stored_records

    records = stored_records(stage, out, [r for runs in finals_by_group.values() for r in runs])
    first = next((rec for rec in records.values() if rec), None)
    if first is None:
        return {}
    metrics = {}
    for task, metric in chosen_metrics(stage, first):
        metrics[f"eval:{task}/{metric}"] = {
            "lower_is_better": lower_is_better(first, task, metric),
            "cap": None,
            "limit": stage.limit,
            "groups": {
                g: _record(
                    runs, [summaries(r) for r in runs], [metric_value(records[r.name], task, metric) for r in runs]
                )
                for g, runs in finals_by_group.items()
            },
        }
    return metrics


def secondary_metrics(sweep: Sweep, out: Path, finals_by_group: dict[str, list[RunSpec]], summaries) -> dict:
    """{metric: {"lower_is_better", "cap", "groups": {group: {seeds, statuses, raw}}}} for the metrics these
    groups' final runs have. `summaries(run)` reads a run's summary.json."""
    metrics: dict = {}
    all_runs = [r for runs in finals_by_group.values() for r in runs]
    if any(s is not None and s.has(BLEU) for s in map(summaries, all_runs)):
        metrics[BLEU] = {
            "lower_is_better": False,
            "cap": 0.0,
            "groups": {
                g: _record(runs, [summaries(r) for r in runs], [getattr(summaries(r), BLEU, None) for r in runs])
                for g, runs in finals_by_group.items()
            },
        }
    if sweep.evaluation is not None:
        metrics.update(eval_metrics(sweep.evaluation, out, finals_by_group, summaries))
    stage = sweep.finetune
    if stage is None:
        return metrics
    step = max(stage.steps) if stage.steps else None
    for task in stage.tasks:
        results = {r.name: _read(stage_dir(out, r.name, task, step) / "finetune.json") for r in all_runs}
        if not any(results.values()):
            continue
        caps = [x["majority_baseline"] for x in results.values() if x and _finite(x.get("majority_baseline"))]
        groups = {}
        for g, runs in finals_by_group.items():
            statuses = [_finetune_status(results[r.name], summaries(r)) for r in runs]
            raw = [finetune_value(results[r.name]) for r in runs]
            groups[g] = {"seeds": [r.seed for r in runs], "statuses": statuses, "raw": raw}
        metrics[f"finetune:{task}"] = {
            "lower_is_better": False,
            "cap": statistics.median(caps) if caps else None,
            "step": step,
            "groups": groups,
        }
    return metrics
