"""The compute frontier (docs/verdicts.md, "Sizes"): a power law of score against training FLOPs, and the compute
multiplier of a group against the reference's law, with a bootstrap interval over seeds."""

from __future__ import annotations

import math

import numpy as np

from blocklab.stats.basic import floats, mean_sd


def fit_power_law(flops: list[float], scores: list[float]) -> dict:
    """Least-squares fit of log(score) = log(a) - alpha * log(C) .

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
    """The compute C at which the fitted power law reaches `score`: a * C^-alpha == score .

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
    """The group's compute multiplier against the reference .

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
    ref_scores = [np.asarray(floats(s["scores"])) for s in ref]
    top_scores = np.asarray(floats(top["scores"]))
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
