"""Means, standard deviations and Student-t intervals of a list of scores (docs/verdicts.md: a group's numbers)."""

from __future__ import annotations

import math

from scipy import special as _sp

# Means that differ only by rounding (the same scores summed in another order, or a value repeated n times
# and divided by n) count as equal: ties and "the best mean is the cap" must not hinge on the last bit.
REL_TIE = 1e-12


def floats(xs) -> list[float]:
    out = [float(x) for x in xs]
    # A failed run has no score (it is counted, never scored), so a NaN or infinity here is an upstream bug.
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"scores must be finite numbers, got {out}")
    return out


def same(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=REL_TIE, abs_tol=0.0)


def mean_sd(xs) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof=1) of `xs`; sd is None for one value."""
    xs = floats(xs)
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


def t_quantile(level: float, df: float) -> float:
    """The two-sided Student-t quantile of a `level` interval with `df` degrees of freedom (scipy.special's
    stdtrit: the t distribution's own functions, without scipy.stats' per-call overhead, which a sweep's
    verdicts and the tests' simulations pay thousands of times)."""
    return float(_sp.stdtrit(df, 1 - (1 - level) / 2))


def t_sf(x: float, df: float) -> float:
    """P(T > x) for Student's t with `df` degrees of freedom."""
    return float(_sp.stdtr(df, -x))


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom."""
    return float(_sp.stdtr(df, x))


def t_interval(xs, level: float = 0.95) -> list[float] | None:
    """Student-t interval of the mean of `xs` (a group's `ci95` over its completed final seeds).

    None for fewer than two values; [m, m] when the sd is 0.
    """
    xs = floats(xs)
    if len(xs) < 2:
        return None
    m, sd = mean_sd(xs)
    if sd == 0:
        return [m, m]
    half = t_quantile(level, len(xs) - 1) * sd / math.sqrt(len(xs))
    return [m - half, m + half]


def within(interval: list[float] | None, low: float | None = None, high: float | None = None) -> list[float] | None:
    """`interval` cut to [low, high]: a score no run can reach (a mean loss above the cap, a BLEU below 0) is
    no value an interval may show. The mean of completed runs lies inside those bounds by construction."""
    if interval is None:
        return None
    lo, hi = interval
    if low is not None:
        lo, hi = max(lo, low), max(hi, low)
    if high is not None:
        lo, hi = min(lo, high), min(hi, high)
    return [lo, hi]


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


def pooled_sd(samples: list[list[float]]) -> tuple[float | None, int]:
    """The pooled within-group standard deviation of several groups' scores, and its degrees of freedom:
    sqrt(sum of squared deviations from each group's own mean / sum of (n - 1)). Groups of one score add
    nothing; None when no group has two."""
    ss, df = [], 0
    for xs in samples:
        xs = floats(xs)
        if len(xs) < 2:
            continue
        m = math.fsum(xs) / len(xs)
        ss.append(math.fsum((x - m) ** 2 for x in xs))
        df += len(xs) - 1
    return (math.sqrt(math.fsum(ss) / df) if df else None), df
