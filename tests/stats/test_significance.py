"""blocklab.stats.significance: each test against scipy computed independently (ttest_rel, ttest_ind,
boschloo_exact, the t distribution) or against the formulas written out here."""

import math

import numpy as np
import pytest
from scipy import stats as st

from blocklab import stats


def _welch_by_hand(a, b, level=0.95):
    """The Welch-Satterthwaite interval and two-sided p written out from the formulas."""
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1) / na
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1) / nb
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    se = math.sqrt(va + vb)
    half = st.t.ppf(1 - (1 - level) / 2, df) * se
    return ma - mb, [ma - mb - half, ma - mb + half], 2 * st.t.sf(abs(ma - mb) / se, df), se, df


def test_welch_against_a_hand_computation_and_scipy():
    a, b = [1, 2, 3, 4], [3, 5, 7]
    r = stats.welch(a, b)
    # By hand: d = -2.5; se^2 = (5/3)/4 + 4/3 = 1.75; df = 3.2347; t(0.975, 3.2347) = 3.0557.
    assert r["difference"] == pytest.approx(-2.5)
    assert r["ci95"] == pytest.approx([-6.5423280, 1.5423280], abs=1e-6)
    d, ci, p, se, df = _welch_by_hand(a, b)
    assert (r["ci95"], r["p"], r["se"], r["df"]) == (
        pytest.approx(ci),
        pytest.approx(p),
        pytest.approx(se),
        pytest.approx(df),
    )
    rng = np.random.default_rng(2)
    for n_a, n_b in [(2, 2), (3, 5), (4, 2), (8, 8)]:
        a, b = rng.normal(0.0, 1.0, n_a), rng.normal(0.5, 2.0, n_b)
        assert stats.welch(a, b)["p"] == pytest.approx(st.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-10)
        lo, hi = st.ttest_ind(a, b, equal_var=False).confidence_interval(0.99)
        assert stats.welch(a, b, level=0.99)["ci95"] == pytest.approx([lo, hi], rel=1e-10)


def test_welch_degenerate_spreads():
    r = stats.welch([2.0, 2.0, 2.0], [2.0, 2.0])
    assert (r["difference"], r["ci95"], r["p"], r["se"]) == (0.0, [0.0, 0.0], 1.0, 0.0)
    r = stats.welch([0.1, 0.1, 0.1], [0.3, 0.3, 0.3])
    assert r["p"] == 0.0 and r["ci95"] == [r["difference"]] * 2
    # One side constant: the interval is the other side's t interval.
    r = stats.welch([1.0, 1.0, 1.0], [1, 2, 3, 4, 5])
    assert r["ci95"] == pytest.approx([-2.0 - 1.9632432, -2.0 + 1.9632432], abs=1e-6)
    with pytest.raises(ValueError):
        stats.welch([1.0], [1.0, 2.0])


def test_paired_is_scipys_ttest_rel():
    rng = np.random.default_rng(11)
    for n in (2, 4, 5, 9):
        common = rng.normal(4.0, 0.3, n)  # the seed's data, shared by both sides
        a, b = common + rng.normal(0.05, 0.02, n), common + rng.normal(0.0, 0.02, n)
        r = stats.paired(a, b)
        ref = st.ttest_rel(a, b)
        assert r["p"] == pytest.approx(ref.pvalue, rel=1e-10)
        lo, hi = ref.confidence_interval(0.95)
        assert r["ci95"] == pytest.approx([lo, hi], rel=1e-10)
        assert r["df"] == n - 1 and r["difference"] == pytest.approx(np.mean(a - b))
        assert r["sd"] == pytest.approx(np.std(a - b, ddof=1))
        if n >= 3:
            assert r["correlation"] == pytest.approx(np.corrcoef(a, b)[0, 1])
    # The pairing removes what the seeds share: Welch on the same numbers sees nothing.
    common = rng.normal(4.0, 0.3, 5)
    a, b = common + 0.05 + rng.normal(0, 0.01, 5), common + rng.normal(0, 0.01, 5)
    assert stats.paired(a, b)["p"] < 0.001 < 0.5 < stats.welch(a, b)["p"]
    with pytest.raises(ValueError):
        stats.paired([1.0, 2.0], [1.0])


def test_paired_with_identical_differences():
    # The same difference on every seed, up to float rounding: a certain difference, not a t statistic of 0/0.
    r = stats.paired([1.1, 2.1, 3.1], [1.0, 2.0, 3.0])
    assert r["difference"] == pytest.approx(0.1) and r["p"] < 1e-10
    r = stats.paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (r["difference"], r["p"], r["ci95"]) == (0.0, 1.0, [0.0, 0.0])


def test_equivalence_is_the_interval_inside_the_margin():
    """Two one-sided tests at alpha reject exactly when the interval at 1 - 2 alpha lies inside the margin; the
    p value is the larger one-sided p, each computed here from the t distribution."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        d, se, df = rng.normal(0, 0.08), abs(rng.normal(0.03, 0.01)) + 1e-4, int(rng.integers(1, 12))
        margin, alpha = 0.1, 0.05 / int(rng.integers(1, 8))
        p = stats.equivalence_p(d, se, df, margin)
        p_low = 1 - st.t.cdf((d + margin) / se, df)
        p_high = st.t.cdf((d - margin) / se, df)
        assert p == pytest.approx(max(p_low, p_high), rel=1e-9, abs=1e-15)
        lo, hi = stats.interval(d, se, df, 1 - 2 * alpha)
        assert (p < alpha) == (-margin < lo and hi < margin)
    assert stats.equivalence_p(0.05, 0.0, 3, 0.1) == 0.0 and stats.equivalence_p(0.2, 0.0, 3, 0.1) == 1.0
    with pytest.raises(ValueError):
        stats.equivalence_p(0.0, 0.1, 3, 0.0)


@pytest.mark.parametrize("k_a, n_a, k_b, n_b", [(1, 5, 0, 5), (3, 5, 0, 5), (5, 5, 0, 5), (2, 4, 1, 5), (0, 3, 3, 3)])
def test_boschloo_is_scipys(k_a, n_a, k_b, n_b):
    expected = st.boschloo_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]], alternative="two-sided").pvalue
    assert stats.boschloo(k_a, n_a, k_b, n_b) == pytest.approx(min(1.0, expected), rel=1e-12)
    # Boschloo is at least as powerful as Fisher's exact test.
    fisher = st.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]]).pvalue
    assert stats.boschloo(k_a, n_a, k_b, n_b) <= fisher + 1e-12


def test_boschloo_edges():
    assert stats.boschloo(0, 5, 0, 5) == 1.0  # nobody failed
    assert stats.boschloo(5, 5, 3, 3) == 1.0  # everybody failed
    with pytest.raises(ValueError):
        stats.boschloo(6, 5, 0, 5)


def test_holm_worked_by_hand():
    # Sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> raised to 0.06 (monotone).
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])
    assert stats.holm([0.02]) == [0.02] and stats.holm([]) == []
    with pytest.raises(ValueError):
        stats.holm([0.1, float("nan")])


def test_holm_levels_are_the_step_down_levels_worked_by_hand():
    # sorted p: 0.005 <= 0.05/4 rejects, 0.01 <= 0.05/3 rejects, 0.03 > 0.05/2 stops: the rest judged at 0.05/2
    assert stats.holm_levels([0.01, 0.04, 0.03, 0.005], 0.05) == pytest.approx([0.05 / 3, 0.05 / 2, 0.05 / 2, 0.05 / 4])
    assert stats.holm_levels([0.001, 0.002], 0.05) == pytest.approx([0.025, 0.05])  # both rejected
    assert stats.holm_levels([0.9], 0.05) == [0.05] and stats.holm_levels([], 0.05) == []
    # a test is rejected (adjusted p < alpha) exactly when its p is at most its level
    rng = np.random.default_rng(1)
    for _ in range(200):
        ps = list(rng.uniform(0, 0.06, int(rng.integers(1, 9))))
        for p, adj, level in zip(ps, stats.holm(ps), stats.holm_levels(ps, 0.05)):
            assert (adj < 0.05) == (p <= level) or abs(adj - 0.05) < 1e-12


def test_family_interval_is_the_t_interval_at_the_bonferroni_level():
    # m = 4 tests: level 1 - 0.05/4; t(1 - 0.00625, 4) from scipy.
    lo, hi = stats.interval(0.2, 0.05, 4, 1 - 0.05 / 4)
    half = st.t.ppf(1 - 0.05 / 8, 4) * 0.05
    assert (lo, hi) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    assert stats.interval(0.2, 0.0, 4, 0.99) == [0.2, 0.2]
