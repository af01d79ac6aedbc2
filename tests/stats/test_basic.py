"""blocklab.stats.basic: means, intervals and the pooled spread, against values worked out by hand or by scipy."""

import math

import numpy as np
import pytest
from scipy import stats as st

from blocklab import stats


def test_mean_sd_and_one_value():
    m, sd = stats.mean_sd([1, 2, 3, 4, 5])
    assert m == 3.0 and sd == pytest.approx(math.sqrt(2.5))
    assert stats.mean_sd([4.2]) == (4.2, None)
    # Repeated values: exactly the value and exactly 0, not off by an ulp (3 * 0.1 / 3 is not 0.1 in floats).
    assert stats.mean_sd([0.1, 0.1, 0.1]) == (0.1, 0.0)
    with pytest.raises(ValueError):
        stats.mean_sd([])
    with pytest.raises(ValueError):
        stats.mean_sd([1.0, float("nan")])


def test_t_interval_matches_a_textbook_quantile():
    # mean 3, sd sqrt(2.5), n 5: half-width t(0.975, 4) * sqrt(2.5 / 5); the t table gives 2.7764.
    lo, hi = stats.t_interval([1, 2, 3, 4, 5])
    half = 2.7764451 * math.sqrt(0.5)
    assert lo == pytest.approx(3 - half, abs=1e-6) and hi == pytest.approx(3 + half, abs=1e-6)
    lo, hi = stats.t_interval([1, 2, 3, 4, 5], level=0.90)  # t(0.95, 4) = 2.1318 from the table
    assert hi - 3 == pytest.approx(2.1318468 * math.sqrt(0.5), abs=1e-6)
    assert stats.t_interval([7.0]) is None and stats.t_interval([]) is None
    assert stats.t_interval([2.5, 2.5, 2.5]) == [2.5, 2.5]


def test_within_cuts_an_interval_to_the_values_a_score_can_take():
    # A mean loss of completed runs lies below the failure line: an interval above it is impossible.
    assert stats.within([4.0, 6.5], high=5.83) == [4.0, 5.83]
    assert stats.within([-0.2, 0.4], low=0.0) == [0.0, 0.4]  # a BLEU below 0
    assert stats.within([7.0, 8.0], high=5.0) == [5.0, 5.0]
    assert stats.within([1.0, 2.0]) == [1.0, 2.0] and stats.within(None, high=1.0) is None


def test_pooled_sd_is_the_anova_within_group_spread():
    groups = [[4.0, 4.1, 3.9, 4.2], [5.0, 5.3], [3.3], [6.0, 6.0, 6.3]]
    sd, df = stats.pooled_sd(groups)
    # The within-group mean square of a one-way ANOVA over the groups with two or more values.
    kept = [np.asarray(g) for g in groups if len(g) > 1]
    ss = sum(((g - g.mean()) ** 2).sum() for g in kept)
    assert df == sum(len(g) - 1 for g in kept) == 6
    assert sd == pytest.approx(math.sqrt(ss / df))
    # For two groups it is the square root of the pooled variance of Student's equal-variance t test.
    a, b = [1.0, 2.0, 4.0], [2.0, 5.0, 5.5, 6.0]
    t = st.ttest_ind(a, b, equal_var=True).statistic
    sd2, _ = stats.pooled_sd([a, b])
    assert abs(np.mean(a) - np.mean(b)) / (sd2 * math.sqrt(1 / 3 + 1 / 4)) == pytest.approx(abs(t))
    assert stats.pooled_sd([[1.0], [2.0]]) == (None, 0)
