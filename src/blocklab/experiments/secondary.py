"""Secondary metrics of a sweep's verdicts (SPEC 10): what a group is for beyond its pre-training loss.

- `final_bleu`: a translation run's BLEU at the end of its schedule (higher is better; a failed run
  scores the cap, 0).
- `eval:TASK/METRIC`: an evaluation stage's harness score (experiments/evaluation.py) of each completed
  final run on its exported model; lower or higher is better as the harness says (bits per byte: lower).
- `finetune:TASK`: a fine-tuning stage's dev score on TASK, one score per pre-training seed: the mean
  over that run's fine-tuning seeds, from its final checkpoint (or the latest of the stage's `steps`).
  The cap is the task's majority-class score: a run whose pre-training failed, or whose fine-tunes
  all failed or ended below the majority class, scores it.

The best tuned value is chosen on the primary metric only; these metrics are scored at it, compared
with the reference by Welch and join the sweep's Holm family.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from blocklab import stats
from blocklab.experiments.downstream import stage_dir
from blocklab.experiments.sweep import RunSpec, Sweep

BLEU = "final_bleu"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bleu_score(summary: dict | None) -> float | None:
    """A final run's BLEU score: its final BLEU when it completed, the cap (0) when it failed, None while
    it has no summary."""
    if summary is None:
        return None
    value = summary.get(BLEU)
    return float(value) if summary.get("status") == "completed" and _finite(value) else 0.0


def finetune_score(result: dict | None, cap: float | None) -> float | None:
    """One pre-training run's score on a task: the mean over its completed fine-tuning seeds, the cap
    where pre-training failed (skipped), every fine-tune failed or the mean is below the cap; None while
    the stage has not run."""
    if result is None or (result.get("status") == "interrupted" and not result.get("scores")):
        return None
    ok = [
        s
        for s, status in zip(result.get("scores") or [], result.get("statuses") or [])
        if status == "completed" and _finite(s)
    ]
    if not ok:
        return cap if cap is not None else None
    mean = statistics.fmean(ok)
    return cap if cap is not None and mean < cap else mean


def _entry(runs: list[RunSpec], scores: list[float | None]) -> dict:
    pairs = [(r.seed, s) for r, s in zip(runs, scores) if s is not None]
    values = [s for _, s in pairs]
    mean, sd = stats.mean_sd(values) if values else (None, None)
    return {
        "seeds": [seed for seed, _ in pairs],
        "scores": values,
        "mean": mean,
        "sd": sd,
        "ci95": stats.t_interval(values) if len(values) > 1 else None,
    }


def eval_metrics(stage, out: Path, finals_by_group: dict[str, list[RunSpec]]) -> dict:
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
                g: _entry(runs, [metric_value(records[r.name], task, metric) for r in runs])
                for g, runs in finals_by_group.items()
            },
            "comparisons": {},
        }
    return metrics


def secondary_metrics(sweep: Sweep, out: Path, finals_by_group: dict[str, list[RunSpec]], summaries) -> dict:
    """{metric: {"lower_is_better", "cap", "groups": {group: {seeds, scores, mean, sd, ci95}}, "comparisons": {}}}
    for the metrics these groups' final runs have. `summaries(run)` reads a run's summary.json."""
    metrics: dict = {}
    all_runs = [r for runs in finals_by_group.values() for r in runs]
    if any(BLEU in (summaries(r) or {}) for r in all_runs):
        metrics[BLEU] = {
            "lower_is_better": False,
            "cap": 0.0,
            "groups": {
                g: _entry(runs, [bleu_score(summaries(r)) for r in runs]) for g, runs in finals_by_group.items()
            },
            "comparisons": {},
        }
    if sweep.evaluation is not None:
        metrics.update(eval_metrics(sweep.evaluation, out, finals_by_group))
    stage = sweep.finetune
    if stage is None:
        return metrics
    step = max(stage.steps) if stage.steps else None
    for task in stage.tasks:
        results = {r.name: _read(stage_dir(out, r.name, task, step) / "finetune.json") for r in all_runs}
        if not any(results.values()):
            continue
        caps = [x["majority_baseline"] for x in results.values() if x and _finite(x.get("majority_baseline"))]
        cap = statistics.median(caps) if caps else None
        metrics[f"finetune:{task}"] = {
            "lower_is_better": False,
            "cap": cap,
            "step": step,
            "groups": {
                g: _entry(runs, [finetune_score(results[r.name], cap) for r in runs])
                for g, runs in finals_by_group.items()
            },
            "comparisons": {},
        }
    return metrics
