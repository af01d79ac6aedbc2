"""The numbers of the report: smoothed losses, the target loss, steps to reach it, one table row per run."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blocklab.reporting.runs import Run
from blocklab.run_summary import RunSummary

MAX_WINDOW = 50


def smoothing_window(n_points: int) -> int:
    """A light moving average: 1/20 of the logged points, between 1 (none) and MAX_WINDOW."""
    return max(1, min(MAX_WINDOW, n_points // 20))


def smooth(values, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (over the points so far at the start)."""
    y = np.asarray(values, dtype=float)
    if window <= 1 or y.size == 0:
        return y.copy()
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, y.size + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def smoothed_loss(run: Run, x: str = "step") -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(x, raw training loss, smoothed training loss, window) of a run."""
    xs, ys = run.series("loss", x)
    w = smoothing_window(len(ys))
    return np.asarray(xs), np.asarray(ys), smooth(ys, w), w


def final_smoothed_loss(run: Run) -> float | None:
    _, _, s, _ = smoothed_loss(run)
    return float(s[-1]) if s.size else None


def steps_to_target(run: Run, target: float | None) -> int | None:
    """The first logged step at which the smoothed training loss is at or below `target` (None: never)."""
    if target is None:
        return None
    steps, _, s, _ = smoothed_loss(run)
    hit = np.nonzero(s <= target)[0]
    return int(steps[hit[0]]) if hit.size else None


@dataclass
class Target:
    value: float | None
    source: str  # "given" | "worst-completed" | "none"
    note: str  # one sentence for the report


def choose_target(runs: list[Run], target_loss: float | None = None, reference: str | None = None) -> Target:
    """`target_loss` when given; else the final smoothed training loss of the sweep's `reference` run
    (sweep.json's target_run: how many steps each block needs to match it); else the worst final smoothed
    training loss of the completed runs, so that every completed run reaches it."""
    if target_loss is not None:
        return Target(float(target_loss), "given", f"Target loss {target_loss:.4g} (given with --target-loss).")
    # the reference names a seed group (sweep.json), or a run by its name, label or folder
    refs = [r for r in runs if reference is not None and reference in (r.name, r.label, r.group, r.path.name)]
    finals = [final_smoothed_loss(r) for r in refs if r.status == "completed"]
    finals = [v for v in finals if v is not None and math.isfinite(v)]
    if refs and len(finals) == len(refs):  # the mean over the reference's seeds
        value = sum(finals) / len(finals)
        seeds = f" (mean of {len(finals)} seeds)" if len(finals) > 1 else ""
        return Target(
            value,
            "reference",
            f"Target loss {value:.4g}: the final smoothed training loss of the reference run "
            f"{refs[0].group_label}{seeds}; steps to target is how long each run takes to match it "
            f"(pass --target-loss to choose another).",
        )
    finals = [(final_smoothed_loss(r), r.label) for r in runs if r.status == "completed"]
    finals = [(v, label) for v, label in finals if v is not None and math.isfinite(v)]
    if not finals:
        return Target(None, "none", "No completed run: no default target loss (give one with --target-loss).")
    value, label = max(finals)
    return Target(
        value,
        "worst-completed",
        f"Target loss {value:.4g}: the worst final smoothed training loss among the completed runs "
        f"({label}), so every completed run reaches it; pass --target-loss to choose another.",
    )


def _last(run: Run, key: str):
    _, ys = run.series(key)
    return ys[-1] if ys else None


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def estimate_parameters(run: Run) -> int | None:
    """Parameter count of a run without a summary: its model built from config.toml (on the meta
    device when large, so nothing is allocated; small models are quicker to build on the CPU)."""
    model = run.config.get("model")
    if not model:
        return None
    try:
        import contextlib

        import torch

        from blocklab.config import ModelConfig
        from blocklab.model import build_model, count_parameters

        cfg = ModelConfig(**model)
        with torch.device("meta") if cfg.rough_parameters > 20_000_000 else contextlib.nullcontext():
            return count_parameters(build_model(cfg))
    except Exception:  # noqa: BLE001 - an odd config only costs the column its value
        return None


def status_text(run: Run) -> str:
    s = run.summary or RunSummary()
    status, total = run.status, run.total_steps
    of = f"/{total}" if total else ""
    if status == "diverged":
        step = s.diverged_step if s.has("diverged_step") else s.step
        return f"diverged at step {step}" if step is not None else "diverged"
    if status == "interrupted":
        return f"interrupted at step {run.last_step}{of}"
    if status == "stalled":
        step = s.stalled_step if s.has("stalled_step") else s.step
        return f"stalled at step {step}" if step is not None else "stalled"
    if status == "completed" or status == "not started":
        return status
    return f"{status} (step {run.last_step}{of})"


def run_row(run: Run, target: Target) -> dict:
    """One table row: raw numbers (None when unknown); `format_row` turns them into text."""
    s = run.summary or RunSummary()
    tps = _num(s.tokens_per_s)
    if tps is None:
        _, rates = run.series("tokens_per_s")
        tps = float(np.median(rates)) if rates else None
    _, evals = run.series("eval_loss")
    best, final_eval = _num(s.best_eval_loss), _num(s.final_eval_loss)
    return {
        "run": run.name,
        "label": run.label,
        "block": run.block,
        "family": run.family,
        "params": _num(s.n_params) or (estimate_parameters(run) if run.exists else None),
        "tokens_per_s": tps,
        "final_loss": final_smoothed_loss(run) if run.rows else _num(s.final_loss),
        "final_eval_loss": final_eval if final_eval is not None else (evals[-1] if evals else None),
        "best_eval_loss": best if best is not None else (min(evals) if evals else None),
        "steps_to_target": steps_to_target(run, target.value),
        "status": run.status,
        "status_text": status_text(run),
        "steps": run.last_step if run.exists else None,
    }


def fmt_params(n) -> str:
    if n is None:
        return "-"
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(int(n))


def fmt_loss(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def fmt_rate(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


COLUMNS = [
    ("label", "run"),
    ("block", "block"),
    ("params", "parameters"),
    ("tokens_per_s", "tokens/s"),
    ("final_loss", "final train loss (smoothed)"),
    ("final_eval_loss", "final eval loss"),
    ("best_eval_loss", "best eval loss"),
    ("steps_to_target", "steps to target"),
    ("status_text", "status"),
]


def format_row(row: dict) -> dict[str, str]:
    reached = row["steps_to_target"]
    return {
        "label": row["label"],
        "block": row["block"],
        "family": row.get("family", ""),
        "params": fmt_params(row["params"]),
        "tokens_per_s": fmt_rate(row["tokens_per_s"]),
        "final_loss": fmt_loss(row["final_loss"]),
        "final_eval_loss": fmt_loss(row["final_eval_loss"]),
        "best_eval_loss": fmt_loss(row["best_eval_loss"]),
        "steps_to_target": str(reached) if reached is not None else "not reached",
        "status_text": row["status_text"],
        "settings": row.get("settings", ""),
    }


TEXT_COLUMNS = ("label", "block", "family", "settings", "status_text")


def families(rows: list[dict]) -> list[str]:
    """The blocks' families the rows hold, in order of appearance."""
    return list(dict.fromkeys(r.get("family", "") for r in rows))


def table_columns(rows: list[dict], base=None) -> list[tuple[str, str]]:
    """`base` (COLUMNS), with a family column when the rows hold blocks of several families and a settings
    column when any row has settings (those that differ between its table's runs)."""
    cols = list(base or COLUMNS)
    at = 2
    if len(families(rows)) > 1:
        cols.insert(at, ("family", "family"))
        at += 1
    if any(r.get("settings") for r in rows):
        cols.insert(at, ("settings", "settings"))
    return cols


def markdown_table(rows: list[dict], base=None, formatter=format_row) -> str:
    """Markdown of the rows: `base` columns (COLUMNS) with a settings column when any row has settings."""
    cols = table_columns(rows, base)

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(h for _, h in cols) + " |",
        "|" + "|".join("---" if k in TEXT_COLUMNS else "---:" for k, _ in cols) + "|",
    ]
    for row in rows:
        f = formatter(row)
        lines.append("| " + " | ".join(cell(f[k]) for k, _ in cols) + " |")
    return "\n".join(lines)
