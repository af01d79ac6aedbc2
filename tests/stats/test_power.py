"""blocklab.stats.power: the power of a two-sided t test from the noncentral t distribution, checked against a
direct Monte Carlo of the test and against scipy's noncentral t computed here."""

import math

import numpy as np
import pytest
from scipy import stats as st

from blocklab import stats


def test_power_is_the_noncentral_t_tail_mass():
    for delta, se, df, alpha in [(0.1, 0.04, 4, 0.05), (0.3, 0.1, 9, 0.01), (0.05, 0.05, 2, 0.05 / 6)]:
        crit = st.t.ppf(1 - alpha / 2, df)
        ncp = delta / se
        expected = 1 - (st.nct.cdf(crit, df, ncp) - st.nct.cdf(-crit, df, ncp))
        assert stats.power(delta, se, df, alpha) == pytest.approx(expected, rel=1e-6)
    assert stats.power(0.0, 0.1, 4, 0.05) == pytest.approx(0.05, rel=1e-9)  # no effect: the level


def test_mde80_has_eighty_percent_power_by_simulation():
    """Paired t tests on 5 seeds with differences of sd 0.05 at level 0.05/5: at the mde80 true difference, 80%
    of simulated comparisons reject."""
    n, sd, alpha = 5, 0.05, 0.05 / 5
    se = sd / math.sqrt(n)
    delta = stats.mde(se, n - 1, alpha)
    assert stats.power(delta, se, n - 1, alpha) == pytest.approx(0.8, abs=1e-6)
    rng = np.random.default_rng(0)
    diffs = rng.normal(delta, sd, (20000, n))
    p = st.ttest_1samp(diffs, 0.0, axis=1).pvalue
    assert np.mean(p < alpha) == pytest.approx(0.8, abs=0.01)


def test_mde_scales_with_the_standard_error_and_falls_with_seeds():
    assert stats.mde(0.2, 4, 0.05) == pytest.approx(2 * stats.mde(0.1, 4, 0.05))
    per_seed = [stats.mde(0.1 / math.sqrt(n), n - 1, 0.01) for n in (3, 5, 10, 20)]
    assert per_seed == sorted(per_seed, reverse=True)
    assert stats.mde(None, 4, 0.05) is None and stats.mde(0.1, 0.5, 0.05) is None
    assert stats.mde(0.0, 4, 0.05) == 0.0


def test_seeds_needed_is_the_first_count_with_the_power():
    sd, delta, alpha = 0.05, 0.1, 0.05 / 4
    n, reached = stats.seeds_needed(sd, delta, alpha, 0.8, 3, 20)
    assert reached >= 0.8
    # One seed fewer does not reach it (a paired test, nothing assumed of the correlation: sd * sqrt(2)).
    assert stats.power(delta, sd * math.sqrt(2 / (n - 1)), n - 2, alpha) < 0.8
    assert stats.power(delta, sd * math.sqrt(2 / n), n - 1, alpha) == pytest.approx(reached)
    # Capped: a tiny difference asks for the most seeds allowed, and says the power it reached.
    n, reached = stats.seeds_needed(sd, 0.001, alpha, 0.8, 3, 10)
    assert n == 10 and reached < 0.8
    assert stats.seeds_needed(0.0, 0.1, alpha, 0.8, 3, 10)[0] == 3
    with pytest.raises(ValueError):
        stats.seeds_needed(sd, delta, alpha, 0.8, 1, 10)
