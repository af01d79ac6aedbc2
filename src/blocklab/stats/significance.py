"""The tests behind a comparison (docs/verdicts.md): the paired t test on per-seed differences, Welch's test,
two one-sided tests of equivalence, Boschloo's exact test of two failure rates, Holm's step-down correction.

Each loss test returns the difference with the standard error and degrees of freedom it rests on, so the
interval at any level (the family's), the power (stats/power.py) and equivalence follow from one record.
"""

from __future__ import annotations

import math

from scipy import stats as _st

from blocklab.stats.basic import floats, mean_sd, t_cdf, t_quantile, t_sf


def interval(difference: float, se: float, df: float, level: float) -> list[float]:
    """The Student-t interval `difference +- t(level, df) * se`; [d, d] when se is 0."""
    if se == 0:
        return [difference, difference]
    half = t_quantile(level, df) * se
    return [difference - half, difference + half]


def _two_sided_p(difference: float, se: float, df: float) -> float:
    if se == 0:
        # No spread at all: the t statistic is 0/0 or infinite; the difference alone settles it.
        return 1.0 if difference == 0 else 0.0
    return min(1.0, 2 * t_sf(abs(difference) / se, df))


def welch(a, b, level: float = 0.95) -> dict:
    """Welch's unequal-variance comparison of `a` against `b` (group minus reference).

    {"difference": mean(a) - mean(b), "ci95": the Welch-Satterthwaite interval at `level`, "p": two-sided (the
    value of scipy's ttest_ind(equal_var=False)), "se", "df"}. Both sds 0: p = 1.0 if the means are equal,
    else 0.0, and ci95 = [d, d]. Needs two or more values on each side (ValueError otherwise).
    """
    a, b = floats(a), floats(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"welch needs >= 2 values on each side, got {len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    d = ma - mb
    va, vb = sa * sa / len(a), sb * sb / len(b)  # squared standard errors of the two means
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2.0
    return {"difference": d, "ci95": interval(d, se, df, level), "p": _two_sided_p(d, se, df), "se": se, "df": df}


def correlation(a, b) -> float | None:
    """Pearson's correlation of two equally long lists; None with fewer than three pairs or a constant side."""
    a, b = floats(a), floats(b)
    if len(a) < 3 or len(a) != len(b) or min(a) == max(a) or min(b) == max(b):
        return None
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    sab = math.fsum((x - ma) * (y - mb) for x, y in zip(a, b))
    saa, sbb = math.fsum((x - ma) ** 2 for x in a), math.fsum((y - mb) ** 2 for y in b)
    return max(-1.0, min(1.0, sab / math.sqrt(saa * sbb)))


def paired(a, b, level: float = 0.95) -> dict:
    """The paired Student t test of `a` against `b`, item by item (seed by seed: both sides saw the same data).

    {"difference": mean of a_i - b_i, "ci95", "p" (scipy's ttest_rel), "se": sd of the differences / sqrt(n),
    "df": n - 1, "sd": the differences' sd, "correlation": Pearson's r of a and b}. Needs two or more pairs.
    """
    a, b = floats(a), floats(b)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"paired needs two equally long lists of >= 2 values, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b)]
    d, sd = mean_sd(diffs)
    se = sd / math.sqrt(len(diffs))
    df = len(diffs) - 1.0
    return {
        "difference": d,
        "ci95": interval(d, se, df, level),
        "p": _two_sided_p(d, se, df),
        "se": se,
        "df": df,
        "sd": sd,
        "correlation": correlation(a, b),
    }


def equivalence_p(difference: float, se: float, df: float, margin: float) -> float:
    """Two one-sided tests (Schuirmann) of |true difference| < margin: the larger of the two one-sided p values.
    Below alpha exactly when the interval at level 1 - 2 alpha lies inside (-margin, +margin)."""
    if margin <= 0:
        raise ValueError(f"the equivalence margin must be positive, got {margin}")
    if se == 0:
        return 0.0 if abs(difference) < margin else 1.0
    p_low = t_sf((difference + margin) / se, df)  # H0: difference <= -margin
    p_high = t_cdf((difference - margin) / se, df)  # H0: difference >= +margin
    return max(p_low, p_high)


def boschloo(k_a: int, n_a: int, k_b: int, n_b: int) -> float:
    """Boschloo's exact test (two-sided) that `k_a` failures of `n_a` and `k_b` of `n_b` come from one rate.

    Uniformly more powerful than Fisher's exact test at the same level; exact at the seed counts of a sweep.
    p = 1 when neither side failed or both failed every time (the table has an empty column)."""
    for k, n in ((k_a, n_a), (k_b, n_b)):
        if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n >= 1):
            raise ValueError(f"boschloo needs 0 <= failures <= runs and runs >= 1, got {k} of {n}")
    if k_a + k_b == 0 or k_a + k_b == n_a + n_b:
        return 1.0
    table = [[k_a, n_a - k_a], [k_b, n_b - k_b]]
    return float(min(1.0, _st.boschloo_exact(table, alternative="two-sided").pvalue))


def holm_levels(pvalues: list[float], alpha: float) -> list[float]:
    """The level Holm's step-down procedure judged each test at: alpha / (m - i) for the i-th smallest p (from 0)
    while the procedure rejects, alpha / (m - r) for every test from the first it keeps (r rejections). A test's
    interval at 1 - its level excludes 0 exactly when Holm rejects it, so an interval printed at that level
    agrees with the word beside it (Holm's adjusted p alone has no interval)."""
    ps = [float(p) for p in pvalues]
    m = len(ps)
    order = sorted(range(m), key=lambda k: ps[k])
    r = 0
    while r < m and ps[order[r]] <= alpha / (m - r):
        r += 1
    out = [0.0] * m
    for rank, i in enumerate(order):
        out[i] = alpha / (m - rank) if rank < r else alpha / (m - r)
    return out


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (`p_holm` over a family of tests).

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
