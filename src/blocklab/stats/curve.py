"""A group's tuning curve (docs/verdicts.md, "Tuning"): its best value, stable and trainable ranges, sensitivity,
and the value beyond a grid edge that a best at that edge asks for."""

from __future__ import annotations

import math
import numbers

import numpy as np

from blocklab.stats.basic import REL_TIE, mean_sd, same


def numeric(v) -> bool:
    # bool is an int to Python, but a grid of True/False has no "lower" value or range.
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _run_around(i: int, keep: list[bool]) -> tuple[int, int]:
    """The first and last index of the contiguous run of True in `keep` that contains index i."""
    lo = hi = i
    while lo > 0 and keep[lo - 1]:
        lo -= 1
    while hi < len(keep) - 1 and keep[hi + 1]:
        hi += 1
    return lo, hi


def analyse_curve(points: list[dict], tolerance: float, cap: float | None, lower_is_better: bool = True) -> dict:
    """A group's curve over the tuned grid.

    points, in grid order: {"value": v, "scores": one per tuning seed, None where that seed failed}. A value's
    mean is over its completed seeds; a value is *complete* when every tuning seed completed.
    - best: the complete value with the best mean (ties: the lower value for numeric grids, else the first);
      None when no value is complete.
    - best_at_edge: best is the first or last value (numeric grids).
    - stable: the contiguous values around best whose mean is within `tolerance` of the best mean.
    - trainable: the contiguous complete values around best (a failed seed is one that never left the cap).
    - sensitivity: the mean over the grid of |mean - best mean|, a value with a failed seed at the cap.
    Returns those and "means" (one per point, None where no seed completed).
    """
    if not points:
        raise ValueError("analyse_curve needs at least one grid point")
    for p in points:
        if not p["scores"]:
            raise ValueError(f"grid point {p['value']!r} needs one score (or None) per tuning seed")
    values = [p["value"] for p in points]
    done = [[s for s in p["scores"] if s is not None] for p in points]
    means = [mean_sd(d)[0] if d else None for d in done]
    complete = [len(d) == len(p["scores"]) for d, p in zip(done, points)]
    out = {"best": None, "best_at_edge": None, "stable": None, "trainable": None, "sensitivity": None, "means": means}
    ok = [i for i in range(len(points)) if complete[i]]
    if not ok:
        return out
    is_numeric = all(numeric(v) for v in values)
    pick = min if lower_is_better else max
    best_mean = pick(means[i] for i in ok)
    tied = [i for i in ok if same(means[i], best_mean)]
    # Numeric grids arrive ascending, so the lowest value is also the first tied one; min() says the rule.
    b = min(tied, key=lambda i: values[i]) if is_numeric else tied[0]
    best_mean = means[b]
    out["best"] = values[b]
    # Without a cap (no unigram statistics) the failed values cannot be placed: the complete ones alone count.
    at = [means[i] if complete[i] else cap for i in range(len(points))]
    at = [m for m in at if m is not None]
    out["sensitivity"] = math.fsum(abs(m - best_mean) for m in at) / len(at)
    if not is_numeric:
        return out
    out["best_at_edge"] = b == 0 or b == len(values) - 1
    # A hair of slack so that a difference of exactly `tolerance` in decimal is not lost to binary rounding.
    slack = 1e-9 * max(1.0, abs(best_mean))
    near = [m is not None and abs(m - best_mean) <= tolerance + slack for m in means]
    lo, hi = _run_around(b, near)
    out["stable"] = [values[lo], values[hi]]
    lo, hi = _run_around(b, complete)
    out["trainable"] = [values[lo], values[hi]]
    return out


def _round(value: float, like) -> float | int:
    if isinstance(like, int):
        return int(round(value))
    return float(f"{value:.3g}")  # as log_grid writes its values: 0.0003, not 0.00030000000000000003


def next_value(values: list, side: str):
    """The value one step beyond the grid's `side` ("low" or "high"), or None where there is none (fewer than
    two values, values not all positive numbers, a step that rounds back onto the edge).

    The step repeats the ratio of the grid's step one further in (1e-3, 3e-3, 1e-2 goes on to 3e-4 below and
    3e-2 above, keeping a 1-3-10 grid's pattern; a geometric grid's ratio is the same either way); a grid of two
    values repeats its one ratio."""
    if side not in ("low", "high"):
        raise ValueError(f"side must be 'low' or 'high', got {side!r}")
    if len(values) < 2 or not all(numeric(v) and v > 0 for v in values):
        return None
    ordered = list(values) if side == "low" else list(reversed(values))
    edge = ordered[0]
    ratio = ordered[1] / ordered[2] if len(ordered) > 2 else edge / ordered[1]
    if same(ratio, 1.0) or abs(ratio - 1.0) < REL_TIE:
        return None
    value = _round(edge * ratio, edge if all(isinstance(v, int) for v in values) else 0.0)
    if value <= 0 or same(float(value), float(edge)):
        return None
    return value
