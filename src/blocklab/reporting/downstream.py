"""The report's downstream section: the fine-tuning results of a sweep with a `finetune` stage
(experiments/downstream.py), read from DIR/finetune/RUN/[step-N/]TASK/finetune.json.

Two shapes, by the stage: from each run's final checkpoint, a table in the form of He & Hofmann's
Table 1 (score per task as mean ± sd over the fine-tuning seeds, the mean over tasks as mean ± sd
over seeds, parameters, speed
relative to the reference run, failures), with the paper's numbers beside ours where the sweep gives
them (`reference`); from checkpoints along pre-training (`steps`), the score against the
pre-training step per run (Xiong et al. Fig. 4) and the step at which each run first reaches another
run's final score.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from blocklab.reporting.figures import new_figure, place_legend, run_styles, save_figure
from blocklab.reporting.runs import Run
from blocklab.run_summary import RunSummary

FIGURE = "downstream.png"


def _slug(task: str) -> str:  # experiments/downstream.py's stage_dir, read-only here
    return task.replace("/", "_").replace(":", "_")


def _result(root: Path, run: str, task: str, step: int | None) -> dict | None:
    p = root / "finetune" / run / (_slug(task) if step is None else f"step-{step}/{_slug(task)}") / "finetune.json"
    try:
        return json.loads(p.read_text()) if p.is_file() else None
    except ValueError:
        return None


def _pm(mean, sd) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.1f} (one seed)" if sd is None else f"{mean:.1f} ± {sd:.1f}"


def _cell(result: dict | None) -> str:
    if result is None:
        return "not run"
    return "skipped" if result.get("status") == "skipped" else _pm(result["mean"], result["sd"])


def _overall(results: list[dict | None]) -> tuple[float | None, float | None]:
    """The GLUE-like score, mean ± sd over fine-tuning seeds of each seed's mean over the tasks (a seed
    counts where every task completed with it); (None, None) while a task has no result."""
    if not results or not all(r and r.get("scores") for r in results):
        return None, None
    per_seed = []
    for seed in results[0]["seeds"]:
        scores = []
        for r in results:
            j = r["seeds"].index(seed) if seed in r["seeds"] else None
            if j is None or r["statuses"][j] != "completed" or r["scores"][j] is None:
                break
            scores.append(r["scores"][j])
        else:
            per_seed.append(statistics.fmean(scores))
    if not per_seed:
        return None, None
    return statistics.fmean(per_seed), (statistics.stdev(per_seed) if len(per_seed) > 1 else None)


def _pretraining(runs: list[Run], name: str) -> Run | None:
    return next((r for r in runs if r.name.removeprefix("runs/") == name), None)


def table(root: Path, runs: list[Run], stage: dict, reference: dict | None, ref_run: str | None) -> str:
    """He & Hofmann's Table 1 with our numbers: one row per pre-training run."""
    tasks = stage["tasks"]
    base = _pretraining(runs, ref_run) if ref_run else None
    base_tps = base.summary.tokens_per_s if base and base.summary else None
    head = ["run", "params", "speed"] + [t[:18] for t in tasks] + ["score", "failed"]
    if reference:
        head += ["paper score", "paper params", "paper speed"]
    rows, baselines = [head], []
    for r in runs:
        if not r.exists:
            continue
        results = [_result(root, r.name.removeprefix("runs/"), t, None) for t in tasks]
        if not any(results):
            continue
        s = r.summary or RunSummary()
        speed = f"{s.tokens_per_s / base_tps:.2f}x" if base_tps and s.tokens_per_s else "n/a"
        failed = sum(x["failed"] for x in results if x)
        seeds = sum(len(x["seeds"]) for x in results if x)
        label = r.label if r.status == "completed" else f"{r.label} [pre-training {_status(r.summary)}]"
        row = [label, f"{s.n_params / 1e6:.2f}M" if s.n_params else "n/a", speed]
        row += [_cell(x) for x in results]
        row += [_pm(*_overall(results)), f"{failed}/{seeds}"]
        if reference:
            paper = reference.get(r.block, {})
            row += [paper.get("score", ""), paper.get("params", ""), paper.get("speed", "")]
        rows.append(row)
        if not baselines or None in baselines:
            baselines = [x.get("majority_baseline") if x else None for x in results]
    if len(rows) == 1:
        return ""
    if baselines and all(b is not None for b in baselines):
        rows.append(
            ["majority class", "", ""]
            + [f"{b:.1f}" for b in baselines]
            + [f"{statistics.fmean(baselines):.1f}", ""]
            + (["", "", ""] if reference else [])
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _status(summary: RunSummary | None) -> str:
    if summary is None:
        return "unfinished"
    return f"{summary.status} at step {summary.diverged_step}" if summary.diverged_step else summary.status


def along_pretraining(
    root: Path, runs: list[Run], stage: dict
) -> tuple[dict[str, list[tuple[int, float]]], float | None]:
    """({run label: [(pre-training step, score)]} for the runs fine-tuned at every step, the majority-class
    baseline's score (mean over the tasks))."""
    out, baseline = {}, None
    for r in runs:
        points = []
        for step in stage["steps"]:
            results = [_result(root, r.name.removeprefix("runs/"), t, step) for t in stage["tasks"]]
            overall, _ = _overall(results)
            if overall is not None:
                points.append((step, overall))
                baseline = statistics.fmean(x["majority_baseline"] for x in results)
        if points:
            out[r.label] = points
    return out, baseline


def plot_along(curves: dict, runs: list[Run], path: Path, baseline: float | None = None) -> Path | None:
    if not curves:
        return None
    styles = run_styles(runs)
    fig, ax = new_figure()
    for r in runs:
        if r.label in curves:
            colour, ls = styles.get(r.name, ("#333333", "-"))
            xs, ys = zip(*curves[r.label])
            ax.plot(xs, ys, ls, color=colour, marker="o", label=r.label)
    if baseline is not None:
        ax.axhline(baseline, color="#777777", ls=":", lw=1, label="majority class")
    ax.set_xlabel("pre-training step of the checkpoint")
    ax.set_ylabel("downstream score (mean over tasks and seeds)")
    ax.set_title("Downstream score of checkpoints along pre-training", fontsize=10)
    ax.grid(alpha=0.3)
    place_legend(ax, len(curves) + 1)
    return save_figure(fig, path)


def reach_sentences(curves: dict, baseline: float | None = None) -> list[str]:
    """For each ordered pair of runs: the first checkpoint at which A scores at least B's final score.
    A final score at or below the majority-class baseline is no quality to reach: said once instead."""
    out = []
    flat = [b for b, pb in curves.items() if baseline is not None and pb[-1][1] <= baseline]
    if flat:
        out.append(
            f"At or below the majority-class baseline ({baseline:.1f}) at the end: {', '.join(flat)}; "
            "no step to reach for those."
        )
    for a, pa in curves.items():
        for b, pb in curves.items():
            if a == b or b in flat:
                continue
            target = pb[-1][1]
            hit = next((step for step, sc in pa if sc >= target), None)
            out.append(
                f"{a} reaches {b}'s final score ({target:.1f}) "
                + (
                    f"at step {hit} ({hit / pb[-1][0]:.0%} of {b}'s {pb[-1][0]} steps)."
                    if hit is not None
                    else "at none of its checkpoints."
                )
            )
    return out
