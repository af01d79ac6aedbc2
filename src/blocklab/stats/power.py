"""Power (docs/verdicts.md): what a comparison could have seen, and how many seeds a sweep needs to see it.

A two-sided t test at level alpha with standard error `se` and `df` degrees of freedom detects a true
difference delta with probability P(|T'| > t_crit), T' noncentral t with noncentrality delta / se. `mde`
inverts it: the difference detected with the asked power. The difference scales with se, so the factor
mde / se depends on (df, alpha, power) alone and is found once per call by a root search.
"""

from __future__ import annotations

import math
from functools import lru_cache

from scipy import optimize as _opt
from scipy import special as _sp


def power(delta: float, se: float, df: float, alpha: float) -> float:
    """The probability that a two-sided t test at level `alpha` rejects when the true difference is `delta`."""
    if se <= 0:
        return 1.0 if delta != 0 else alpha
    crit = float(_sp.stdtrit(df, 1 - alpha / 2))
    ncp = abs(delta) / se
    # scipy.special's noncentral t CDF returns NaN deep in a tail (seen with scipy 1.17): there the upper tail
    # is 1 (noncentrality far past the critical value) and the wrong-direction tail 0.
    upper = 1.0 - float(_sp.nctdtr(df, ncp, crit))
    lower = float(_sp.nctdtr(df, ncp, -crit))
    upper = (1.0 if ncp > crit else 0.0) if math.isnan(upper) else upper
    return min(1.0, upper + (0.0 if math.isnan(lower) else lower))


@lru_cache(maxsize=4096)
def _factor(df: float, alpha: float, target: float) -> float:
    """mde / se for a two-sided t test: the noncentrality at which the power reaches `target`."""
    if not 0 < alpha < 1 or not alpha < target < 1:
        raise ValueError(f"power needs 0 < alpha < power < 1, got alpha {alpha} and power {target}")
    hi = float(_sp.stdtrit(df, 1 - alpha / 2)) + 5.0
    while power(hi, 1.0, df, alpha) < target:  # few degrees of freedom need a far larger noncentrality
        hi *= 2
    return float(_opt.brentq(lambda x: power(x, 1.0, df, alpha) - target, 0.0, hi, xtol=1e-10))


def mde(se: float | None, df: float | None, alpha: float, target: float = 0.8) -> float | None:
    """The smallest true difference a two-sided t test (standard error `se`, `df` degrees of freedom, level
    `alpha`) detects with probability `target`: a comparison's `mde80`. None without a standard error."""
    if se is None or df is None or not math.isfinite(se) or df < 1:
        return None
    return _factor(round(float(df), 9), float(alpha), float(target)) * se


def seeds_needed(sd: float, delta: float, alpha: float, target: float, low: int, high: int) -> tuple[int, float]:
    """The fewest seeds per group, from `low` to `high`, at which a paired t test at level `alpha` detects a
    true difference `delta` with probability `target`, and the power it reaches there (at `high` when no count
    reaches `target`). `sd` is the within-group standard deviation of a score: with nothing known of the
    correlation between the two sides a seed difference has sd * sqrt(2) (the pairing can only do better)."""
    if not (isinstance(low, int) and isinstance(high, int) and 2 <= low <= high):
        raise ValueError(f"seeds_needed needs 2 <= low <= high, got {low} and {high}")
    if not (sd >= 0 and delta > 0):
        raise ValueError(f"seeds_needed needs sd >= 0 and delta > 0, got {sd} and {delta}")
    reached = 0.0
    for n in range(low, high + 1):
        reached = power(delta, sd * math.sqrt(2.0 / n), n - 1, alpha)
        if reached >= target:
            return n, reached
    return high, reached
