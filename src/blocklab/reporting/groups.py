"""Seeds: runs that differ only in their seed form a group; the report shows each group's mean and spread.

Spread is the sample standard deviation over the seeds (n - 1 in the denominator) and, in the
curves, the band between the lowest and the highest seed. A group of one run is that run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blocklab.reporting.analysis import fmt_loss, fmt_params, fmt_rate, markdown_table, smoothed_loss, table_columns
from blocklab.reporting.runs import Run

NUMERIC = ("final_loss", "final_eval_loss", "best_eval_loss", "steps_to_target", "tokens_per_s")


@dataclass
class Group:
    name: str
    label: str
    runs: list[Run]
    rows: list[dict]

    @property
    def block(self) -> str:
        return self.runs[0].block

    @property
    def seeds(self) -> list:
        return [r.seed for r in self.runs]


def group_runs(runs: list[Run], rows: list[dict]) -> list[Group]:
    """Groups in the order of their first run; `rows[i]` is the table row of `runs[i]`."""
    out: dict[str, Group] = {}
    for run, row in zip(runs, rows):
        g = out.setdefault(run.group, Group(run.group, run.group_label, [], []))
        g.runs.append(run)
        g.rows.append(row)
    return list(out.values())


def mean_sd(values) -> tuple[float | None, float | None, int]:
    """(mean, sample sd or None for one value, n) over the finite values; (None, None, 0) when none."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    if not xs:
        return None, None, 0
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return mean, sd, len(xs)


def status_summary(rows: list[dict]) -> str:
    """'completed' when all are; else e.g. '1 stalled at step 140, 1 completed'."""
    texts = [r["status_text"] for r in rows]
    if len(set(texts)) == 1:
        return texts[0] if len(texts) == 1 else f"{len(texts)} {texts[0]}"
    return ", ".join(f"{texts.count(t)} {t}" for t in dict.fromkeys(texts))


def group_row(g: Group) -> dict:
    row = {
        "group": g.name,
        "label": g.label,
        "block": g.block,
        "family": g.runs[0].family,
        "n": len(g.runs),
        "params": g.rows[0]["params"],
        "settings": g.rows[0].get("settings", ""),
        "status_text": status_summary(g.rows),
        "statuses": [r["status"] for r in g.rows],
    }
    for key in NUMERIC:
        row[key], row[f"{key}_sd"], row[f"{key}_n"] = mean_sd(r[key] for r in g.rows)
    return row


def _pm(mean, sd, fmt) -> str:
    if mean is None:
        return "-"
    return fmt(mean) if sd is None else f"{fmt(mean)} ± {fmt(sd)}"


GROUP_COLUMNS = [
    ("label", "run"),
    ("block", "block"),
    ("n", "seeds"),
    ("params", "parameters"),
    ("tokens_per_s", "tokens/s"),
    ("final_loss", "final train loss (smoothed)"),
    ("final_eval_loss", "final eval loss"),
    ("best_eval_loss", "best eval loss"),
    ("steps_to_target", "steps to target"),
    ("status_text", "status"),
]


def format_group_row(row: dict) -> dict[str, str]:
    steps = row["steps_to_target"]
    reached = row["steps_to_target_n"]
    if steps is None:
        steps_text = "not reached"
    else:
        steps_text = _pm(steps, row["steps_to_target_sd"], lambda x: f"{x:.0f}")
        if reached < row["n"]:
            steps_text += f" ({reached} of {row['n']} reached)"
    return {
        "label": row["label"],
        "block": row["block"],
        "family": row.get("family", ""),
        "n": str(row["n"]),
        "params": fmt_params(row["params"]),
        "tokens_per_s": _pm(row["tokens_per_s"], row["tokens_per_s_sd"], fmt_rate),
        "final_loss": _pm(row["final_loss"], row["final_loss_sd"], fmt_loss),
        "final_eval_loss": _pm(row["final_eval_loss"], row["final_eval_loss_sd"], fmt_loss),
        "best_eval_loss": _pm(row["best_eval_loss"], row["best_eval_loss_sd"], fmt_loss),
        "steps_to_target": steps_text,
        "status_text": row["status_text"],
        "settings": row["settings"],
    }


def group_columns(rows: list[dict]) -> list[tuple[str, str]]:
    return table_columns(rows, GROUP_COLUMNS)


def group_markdown_table(rows: list[dict]) -> str:
    return markdown_table(rows, GROUP_COLUMNS, format_group_row)


def mean_curve(runs: list[Run], x: str = "step"):  # x: a logged column shared by the seeds, e.g. "step"
    """(steps, mean, low, high) of the smoothed training loss over the runs, on the steps that every run
    has logged (a seed that stopped early, stalled or diverged, ends the common part; the figure draws
    each seed thin as well). None when there is nothing in common."""
    curves = [smoothed_loss(r, x) for r in runs if r.rows]
    curves = [(xs, sm) for xs, _, sm, _ in curves if len(xs)]
    if not curves:
        return None
    common = sorted(set.intersection(*(set(xs.tolist()) for xs, _ in curves)))
    if not common:
        return None
    stacked = np.array([[dict(zip(xs.tolist(), sm.tolist()))[c] for c in common] for xs, sm in curves])
    return np.array(common), stacked.mean(0), stacked.min(0), stacked.max(0)
