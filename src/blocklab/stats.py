"""The statistics of a fair comparison (SPEC section 10): intervals, Welch's test, Holm's correction,
the verdict, the tuning curve's best value and ranges, and the compute frontier's power law and multiplier.

Plain functions on lists of floats: no torch, so the sweep's verdicts can be recomputed from stored scores.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from scipy import stats as _st

# Means that differ only by rounding (the same scores summed in another order, or a value repeated n times
# and divided by n) count as equal: ties and "the best mean is the cap" must not hinge on the last bit.
_REL_TIE = 1e-12


def _floats(xs) -> list[float]:
    out = [float(x) for x in xs]
    # A diverged run scores the cap (SPEC 10), so a NaN or infinity here is an upstream bug, not a score.
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"scores must be finite numbers, got {out}")
    return out


def _same(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=_REL_TIE, abs_tol=0.0)


def mean_sd(xs) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1) of `xs`; sd is None for one value (SPEC 10: a group's scores)."""
    xs = _floats(xs)
    if not xs:
        raise ValueError("mean_sd needs at least one value")
    if min(xs) == max(xs):
        # Exactly the value and exactly 0: summing n copies and dividing by n can be off by one ulp, which
        # would turn "both standard deviations 0" into a tiny nonzero sd.
        return xs[0], (0.0 if len(xs) > 1 else None)
    n = len(xs)
    m = math.fsum(xs) / n  # fsum: the same scores in any order give the same mean
    if n == 1:
        return m, None
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))


def paired_se(a, b, weights=None) -> float | None:
    """Standard error of mean(a) - mean(b) when both are (weighted) means over the same items, paired item by
    item: what noise the choice of items adds to a difference, which the spread of each side alone overstates
    when the items differ more from each other than the two sides do. Items are the sampling unit; weights
    (e.g. tokens per item) give the weighted means. None with fewer than two items or unequal lengths."""
    n = len(a)
    if n < 2 or len(b) != n:
        return None
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    total = math.fsum(w)
    if len(w) != n or total <= 0:
        return None
    d = [x - y for x, y in zip(a, b)]
    mean = math.fsum(wi * di for wi, di in zip(w, d)) / total
    return math.sqrt(n / (n - 1) * math.fsum((wi / total) ** 2 * (di - mean) ** 2 for wi, di in zip(w, d)))


def t_interval(xs, level: float = 0.95) -> list[float] | None:
    """Student-t interval of the mean of `xs` (SPEC 10: a group's `ci95` over its final seeds).

    None for fewer than two values; [m, m] when the sd is 0.
    """
    xs = _floats(xs)
    if len(xs) < 2:
        return None
    m, sd = mean_sd(xs)
    if sd == 0:
        return [m, m]
    half = float(_st.t.ppf(1 - (1 - level) / 2, len(xs) - 1)) * sd / math.sqrt(len(xs))
    return [m - half, m + half]


def welch(a, b, level: float = 0.95) -> dict:
    """Welch's unequal-variance comparison of `a` against `b` (SPEC 10: a comparison, group minus reference).

    Returns {"difference": mean(a) - mean(b), "ci95": the Welch-Satterthwaite t interval at `level`,
    "p": the two-sided p, the value scipy's ttest_ind(equal_var=False) gives}. Both sds 0: p = 1.0 if the
    means are equal, else 0.0, and ci95 = [d, d]. Needs two or more values on each side (ValueError otherwise).
    """
    a, b = _floats(a), _floats(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch needs >= 2 values on each side, got {len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    d = ma - mb
    va, vb = sa * sa / len(a), sb * sb / len(b)  # squared standard errors of the two means
    if va + vb == 0:
        # No spread on either side: the t statistic is 0/0; the spec settles it by the means alone.
        return {"difference": d, "ci95": [d, d], "p": 1.0 if ma == mb else 0.0}
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    half = float(_st.t.ppf(1 - (1 - level) / 2, df)) * se
    # The same p as ttest_ind(equal_var=False) (same statistic, same df), at a tenth of its cost: a sweep's
    # verdicts and the tests' false-positive simulation run thousands of these.
    p = float(2 * _st.t.sf(abs(d) / se, df))
    return {"difference": d, "ci95": [d - half, d + half], "p": p}


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (SPEC 10: `p_holm` over the sweep's comparisons).

    The i-th smallest p (from 0) is multiplied by m - i, made non-decreasing along the sorted order and capped at 1.
    """
    ps = [float(p) for p in pvalues]
    if any(not 0.0 <= p <= 1.0 for p in ps):  # also catches NaN
        raise ValueError(f"p-values must lie in [0, 1], got {ps}")
    m = len(ps)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def verdict(
    difference: float, p_holm: float | None, n_a: int, n_b: int, lower_is_better: bool = True, alpha: float = 0.05
) -> str:
    """The comparison's verdict (SPEC 10): "one seed" when either side has fewer than two seeds; "better" or
    "worse" in the metric's direction when `p_holm < alpha`; else "indistinguishable"."""
    if n_a < 2 or n_b < 2:
        return "one seed"
    if p_holm is None or not p_holm < alpha or difference == 0:
        return "indistinguishable"
    return "better" if (difference < 0) == lower_is_better else "worse"


def min_detectable(sd: float | None, n: int, m: int, alpha: float = 0.05) -> float | None:
    """Half-width of a Welch interval at level 1 - alpha/m with both sides at sd `sd` and `n` seeds each
    (SPEC 10: `min_detectable`, m comparisons). None when n < 2 or sd is None.

    With equal sds and counts, Welch-Satterthwaite's df is 2(n - 1) and the standard error sd * sqrt(2/n).
    """
    if sd is None or n < 2:
        return None
    if m < 1:
        raise ValueError(f"min_detectable needs m >= 1 comparisons, got {m}")
    return float(_st.t.ppf(1 - alpha / (2 * m), 2 * (n - 1))) * float(sd) * math.sqrt(2.0 / n)


def _numeric(v) -> bool:
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


def analyse_curve(points: list[dict], tolerance: float, cap: float, lower_is_better: bool = True) -> dict:
    """A group's tuning curve (SPEC 10: `best`, `best_at_edge`, `stable`, `trainable`, `sensitivity`).

    points, in grid order: {"value": v, "scores": [capped tuning-seed scores], "ok": [per seed: completed and
    at least `tolerance` better than the cap]}. best: the value with the best mean (ties: the lower value for
    numeric grids, else the first in grid order). stable/trainable: [low, high] of the contiguous grid values
    around best whose mean is within `tolerance` of the best mean / where every seed is ok (trainable None
    when best itself is not). sensitivity: the mean over the grid of |mean - best mean| (Wortsman et al.).
    Best mean at the cap: all four are None. Non-numeric values: best_at_edge, stable, trainable are None.
    """
    if not points:
        raise ValueError("analyse_curve needs at least one grid point")
    for p in points:
        if not p["scores"] or len(p["ok"]) != len(p["scores"]):
            raise ValueError(f"grid point {p['value']!r} needs scores and one ok flag per score, got {p}")
    values = [p["value"] for p in points]
    means = [mean_sd(p["scores"])[0] for p in points]
    numeric = all(_numeric(v) for v in values)

    best_mean = min(means) if lower_is_better else max(means)
    tied = [i for i, m in enumerate(means) if _same(m, best_mean)]
    # Numeric grids arrive ascending, so the lowest value is also the first tied one; min() says the rule.
    b = min(tied, key=lambda i: values[i]) if numeric else tied[0]
    best_mean = means[b]
    out = {
        "best": values[b],
        "best_at_edge": None,
        "stable": None,
        "trainable": None,
        "sensitivity": None,
        "means": means,
    }

    # Scores are capped, so "not better than the cap" is "equal to it": every run failed, nothing to rank.
    failed = _same(best_mean, cap) or (best_mean >= cap if lower_is_better else best_mean <= cap)
    if failed:
        return out
    out["sensitivity"] = math.fsum(abs(m - best_mean) for m in means) / len(means)
    if not numeric:
        return out

    out["best_at_edge"] = b == 0 or b == len(values) - 1
    # A hair of slack so that a difference of exactly `tolerance` in decimal is not lost to binary rounding.
    slack = 1e-9 * max(1.0, abs(best_mean))
    lo, hi = _run_around(b, [abs(m - best_mean) <= tolerance + slack for m in means])
    out["stable"] = [values[lo], values[hi]]
    ok = [all(p["ok"]) for p in points]
    if ok[b]:
        lo, hi = _run_around(b, ok)
        out["trainable"] = [values[lo], values[hi]]
    return out


def fit_power_law(flops: list[float], scores: list[float]) -> dict:
    """Least-squares fit of log(score) = log(a) - alpha * log(C) (SPEC 10: the frontier's power law).

    Points with non-positive compute or score have no logarithm and are left out; the rest must span two or
    more distinct compute values (ValueError otherwise). Returns {"a", "alpha", "form": "score = a * C^-alpha"}.
    """
    if len(flops) != len(scores):
        raise ValueError(f"fit_power_law needs one score per compute value, got {len(flops)} and {len(scores)}")
    pts = [(float(c), float(s)) for c, s in zip(flops, scores) if c > 0 and s > 0]
    if len({c for c, _ in pts}) < 2:
        raise ValueError(f"fit_power_law needs >= 2 distinct compute values with positive scores, got {pts}")
    x = np.log([c for c, _ in pts])
    y = np.log([s for _, s in pts])
    slope, intercept = np.polyfit(x, y, 1)
    return {"a": float(math.exp(intercept)), "alpha": float(-slope), "form": "score = a * C^-alpha"}


def compute_to_reach(fit: dict, score: float) -> float | None:
    """The compute C at which the fitted power law reaches `score`: a * C^-alpha == score (SPEC 10: multiplier).

    None when alpha <= 0 (the law never improves with compute) or score <= 0 (no logarithm).
    """
    a, alpha = float(fit["a"]), float(fit["alpha"])
    if not alpha > 0 or not score > 0 or not a > 0:
        return None
    try:
        return math.exp((math.log(a) - math.log(score)) / alpha)
    except OverflowError:  # a score the law reaches only beyond any float compute
        return math.inf


def _means(sizes: list[dict]) -> tuple[list[float], list[float]]:
    return [float(s["flops"]) for s in sizes], [mean_sd(s["scores"])[0] for s in sizes]


def _multiplier(ref_flops, ref_means, target: float, flops: float) -> float | None:
    try:
        fit = fit_power_law(ref_flops, ref_means)
    except ValueError:
        return None
    c = compute_to_reach(fit, target)
    if c is None or not math.isfinite(c / flops):
        return None
    return c / flops


def compute_multiplier(ref: list[dict], group: list[dict], n_boot: int = 1000, seed: int = 0) -> dict:
    """The group's compute multiplier against the reference (SPEC 10: `frontier`'s `multiplier`).

    ref, group: one {"flops": F, "scores": [final-seed scores]} per size. multiplier = the compute the
    reference's fitted law needs to reach the group's mean score at its largest size, divided by the group's
    compute there (> 1: the group needs less). Interval: 2.5 and 97.5 percentiles over `n_boot` bootstrap
    resamples (each size's scores with replacement, independently per size and side) that give a finite value.
    A fit that cannot be made (fewer than two sizes) is None, and so is everything that needs it.
    """
    ref_flops, ref_means = _means(ref)
    try:
        fit = fit_power_law(ref_flops, ref_means)
    except ValueError:
        fit = None
    try:
        group_fit = fit_power_law(*_means(group))
    except ValueError:
        group_fit = None
    out = {"multiplier": None, "multiplier_ci95": None, "fit": fit, "group_fit": group_fit}
    if fit is None or not group:
        return out
    top = max(group, key=lambda s: float(s["flops"]))  # the largest size (the list is ascending: the last)
    out["multiplier"] = _multiplier(ref_flops, ref_means, mean_sd(top["scores"])[0], float(top["flops"]))

    rng = np.random.Generator(np.random.PCG64(seed))
    ref_scores = [np.asarray(_floats(s["scores"])) for s in ref]
    top_scores = np.asarray(_floats(top["scores"]))
    boots = []
    for _ in range(n_boot):
        # Only the group's largest size enters the multiplier, so only it is resampled on the group's side.
        means = [float(rng.choice(s, size=len(s), replace=True).mean()) for s in ref_scores]
        target = float(rng.choice(top_scores, size=len(top_scores), replace=True).mean())
        x = _multiplier(ref_flops, means, target, float(top["flops"]))
        if x is not None:
            boots.append(x)
    if boots:
        lo, hi = np.percentile(boots, [2.5, 97.5])
        out["multiplier_ci95"] = [float(lo), float(hi)]
    return out
