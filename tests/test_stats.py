"""blocklab.stats: the numbers behind a comparison's verdict (SPEC section 10), checked against values worked
out by hand or by a separate route (textbook t quantiles, the Welch-Satterthwaite formula written out here)."""

import math

import numpy as np
import pytest
from scipy.stats import t as student_t
from scipy.stats import ttest_ind

from blocklab import stats

# --- means, intervals, Welch, Holm ---------------------------------------------------------------------------


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
    assert hi - 3 == pytest.approx(1.9632432, abs=1e-6)
    # 90%: t(0.95, 4) = 2.1318 from the table.
    lo, hi = stats.t_interval([1, 2, 3, 4, 5], level=0.90)
    assert hi - 3 == pytest.approx(2.1318468 * math.sqrt(0.5), abs=1e-6)


def test_t_interval_edge_cases():
    assert stats.t_interval([7.0]) is None
    assert stats.t_interval([]) is None
    assert stats.t_interval([2.5, 2.5, 2.5]) == [2.5, 2.5]


def _welch_by_hand(a, b, level=0.95):
    """The Welch-Satterthwaite interval and two-sided p written out from the formulas."""
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1) / na
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1) / nb
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    se = math.sqrt(va + vb)
    half = student_t.ppf(1 - (1 - level) / 2, df) * se
    p = 2 * student_t.sf(abs(ma - mb) / se, df)
    return ma - mb, [ma - mb - half, ma - mb + half], p


def test_welch_against_a_hand_computation():
    a, b = [1, 2, 3, 4], [3, 5, 7]
    # By hand: d = 2.5 - 5 = -2.5; se^2 = (5/3)/4 + 4/3 = 1.75; df = 1.75^2 / ((5/12)^2/3 + (4/3)^2/2) = 3.2347;
    # t(0.975, 3.2347) = 3.0557, so the interval is -2.5 +- 3.0557 * 1.32288; p = 2 * sf(2.5 / 1.32288, 3.2347).
    r = stats.welch(a, b)
    assert r["difference"] == pytest.approx(-2.5)
    assert r["ci95"] == pytest.approx([-6.5423280, 1.5423280], abs=1e-6)
    assert r["p"] == pytest.approx(0.1484713, abs=1e-6)
    d, ci, p = _welch_by_hand(a, b)
    assert r["ci95"] == pytest.approx(ci) and r["p"] == pytest.approx(p)
    # The other way round: the difference and interval flip, p does not.
    r2 = stats.welch(b, a)
    assert r2["difference"] == pytest.approx(2.5) and r2["ci95"] == pytest.approx([-1.5423280, 6.5423280])
    assert r2["p"] == pytest.approx(r["p"])


def test_welch_with_unequal_spreads_and_another_level():
    rng = np.random.default_rng(1)
    a, b = list(rng.normal(1.0, 0.1, 5)), list(rng.normal(1.3, 0.6, 3))
    r = stats.welch(a, b, level=0.99)
    d, ci, p = _welch_by_hand(a, b, level=0.99)
    assert r["difference"] == pytest.approx(d) and r["ci95"] == pytest.approx(ci) and r["p"] == pytest.approx(p)
    assert r["p"] == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)


def test_welch_p_is_scipys_welch_test():
    rng = np.random.default_rng(2)
    for n_a, n_b in [(2, 2), (3, 5), (4, 2), (8, 8)]:
        a, b = rng.normal(0.0, 1.0, n_a), rng.normal(0.5, 2.0, n_b)
        assert stats.welch(a, b)["p"] == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue, rel=1e-10)


def test_welch_both_sds_zero_and_one_sd_zero():
    assert stats.welch([2.0, 2.0, 2.0], [2.0, 2.0]) == {"difference": 0.0, "ci95": [0.0, 0.0], "p": 1.0}
    r = stats.welch([0.1, 0.1, 0.1], [0.3, 0.3, 0.3])
    assert r["p"] == 0.0 and r["ci95"] == [r["difference"], r["difference"]]
    assert r["difference"] == pytest.approx(-0.2)
    # One side constant: the df is the other side's n - 1 and the interval is that side's t interval.
    r = stats.welch([1.0, 1.0, 1.0], [1, 2, 3, 4, 5])
    assert r["difference"] == pytest.approx(-2.0)
    assert r["ci95"] == pytest.approx([-2.0 - 1.9632432, -2.0 + 1.9632432], abs=1e-6)


def test_welch_needs_two_seeds_each_side():
    with pytest.raises(ValueError):
        stats.welch([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        stats.welch([1.0, 2.0], [3.0])


def test_holm_worked_by_hand():
    # Sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> raised to 0.06 (monotone).
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Capped at 1: 0.5 * 2 = 1.0, then 0.6 * 1 = 0.6 -> raised to 1.0.
    assert stats.holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])
    assert stats.holm([0.001, 0.2, 0.9]) == pytest.approx([0.003, 0.4, 0.9])
    assert stats.holm([0.02]) == [0.02]
    assert stats.holm([]) == []
    with pytest.raises(ValueError):
        stats.holm([0.1, float("nan")])


# --- verdicts -------------------------------------------------------------------------------------------------


def test_one_seed_on_either_side():
    assert stats.verdict(-5.0, None, 1, 3) == "one seed"
    assert stats.verdict(-5.0, 0.0001, 3, 1) == "one seed"


@pytest.mark.parametrize("lower_is_better", [True, False])
def test_clearly_separated_groups_get_the_right_direction(lower_is_better):
    low, high = [0.95, 1.0, 1.05], [1.95, 2.0, 2.05]  # means 1.0 and 2.0, sd 0.05
    p_holm = stats.holm([stats.welch(low, high)["p"], stats.welch(high, low)["p"]])
    assert max(p_holm) < 0.05
    d_low = stats.welch(low, high)["difference"]
    assert d_low == pytest.approx(-1.0)
    v_low = stats.verdict(d_low, p_holm[0], 3, 3, lower_is_better=lower_is_better)
    v_high = stats.verdict(-d_low, p_holm[1], 3, 3, lower_is_better=lower_is_better)
    assert (v_low, v_high) == (("better", "worse") if lower_is_better else ("worse", "better"))


def test_indistinguishable_above_alpha():
    assert stats.verdict(-0.3, 0.05, 3, 3) == "indistinguishable"
    assert stats.verdict(-0.3, 0.049, 3, 3) == "better"
    assert stats.verdict(-0.3, 0.07, 3, 3, alpha=0.1) == "better"


def test_a_a_sweeps_rarely_claim_a_difference():
    """1,000 sweeps of 5 groups against a reference, all from one normal: Holm keeps any false verdict <= 5%."""
    rng = np.random.Generator(np.random.PCG64(20231114))
    flagged = 0
    for _ in range(1000):
        ref = rng.normal(3.0, 0.1, 3)
        groups = rng.normal(3.0, 0.1, (5, 3))
        results = [stats.welch(g, ref) for g in groups]
        p_holm = stats.holm([r["p"] for r in results])
        verdicts = [stats.verdict(r["difference"], p, 3, 3) for r, p in zip(results, p_holm)]
        flagged += any(v in ("better", "worse") for v in verdicts)
    assert 0 < flagged / 1000 <= 0.05


def test_min_detectable_by_hand():
    # sd 0.1, 3 seeds, 2 comparisons: df = 2 * (3 - 1) = 4, level 1 - 0.05/2 -> quantile 1 - 0.0125 (table: 3.4954),
    # standard error 0.1 * sqrt(2/3).
    assert stats.min_detectable(0.1, 3, 2) == pytest.approx(3.4954059 * 0.1 * math.sqrt(2 / 3), abs=1e-7)
    # m = 1 is an ordinary 95% Welch interval: t(0.975, 4) = 2.7764.
    assert stats.min_detectable(0.1, 3, 1) == pytest.approx(2.7764451 * 0.1 * math.sqrt(2 / 3), abs=1e-7)
    # The same number as welch's own half-width for two groups that each have sd 0.1 and 3 seeds.
    r = stats.welch([-0.1, 0.0, 0.1], [0.9, 1.0, 1.1], level=1 - 0.05 / 2)
    assert (r["ci95"][1] - r["ci95"][0]) / 2 == pytest.approx(stats.min_detectable(0.1, 3, 2))
    assert stats.min_detectable(0.1, 1, 2) is None
    assert stats.min_detectable(None, 3, 2) is None
    assert stats.min_detectable(0.0, 3, 2) == 0.0


# --- tuning curves --------------------------------------------------------------------------------------------


def _curve(values, means, ok=None, seeds=2):
    """Grid points whose seeds are mean +- 0.01 (so each point's mean is exactly `means[i]` up to rounding)."""
    ok = ok or [True] * len(values)
    return [
        {"value": v, "scores": [m - 0.01, m + 0.01][:seeds], "ok": [o] * seeds} for v, m, o in zip(values, means, ok)
    ]


LR = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]


def test_interior_best():
    r = stats.analyse_curve(_curve(LR, [4.0, 3.5, 3.2, 3.3, 5.0]), tolerance=0.15, cap=6.0)
    assert r["best"] == 1e-3 and r["best_at_edge"] is False
    assert r["stable"] == [1e-3, 3e-3]  # 3.5 is 0.3 away, 5.0 is 1.8 away
    assert r["trainable"] == [1e-4, 1e-2]
    assert r["means"] == pytest.approx([4.0, 3.5, 3.2, 3.3, 5.0])
    assert r["sensitivity"] == pytest.approx((0.8 + 0.3 + 0.0 + 0.1 + 1.8) / 5)


def test_best_at_either_edge():
    low = stats.analyse_curve(_curve(LR, [3.0, 3.5, 4.0, 4.5, 5.0]), tolerance=0.1, cap=6.0)
    assert low["best"] == 1e-4 and low["best_at_edge"] is True and low["stable"] == [1e-4, 1e-4]
    high = stats.analyse_curve(_curve(LR, [5.0, 4.5, 4.0, 3.5, 3.0]), tolerance=0.1, cap=6.0)
    assert high["best"] == 1e-2 and high["best_at_edge"] is True
    single = stats.analyse_curve(_curve([1e-3], [3.0]), tolerance=0.1, cap=6.0)
    assert single["best_at_edge"] is True and single["stable"] == [1e-3, 1e-3] and single["sensitivity"] == 0.0


def test_higher_is_better_picks_the_highest_mean():
    r = stats.analyse_curve(_curve(LR, [10.0, 20.0, 25.0, 24.0, 5.0]), tolerance=2.0, cap=0.0, lower_is_better=False)
    assert r["best"] == 1e-3 and r["stable"] == [1e-3, 3e-3] and r["best_at_edge"] is False


def test_ties_pick_the_lower_value():
    r = stats.analyse_curve(_curve(LR, [4.0, 3.2, 3.5, 3.2, 4.0]), tolerance=0.1, cap=6.0)
    assert r["best"] == 3e-4
    # Scores in another order with the same mean are still a tie (the mean must not depend on the order).
    pts = [
        {"value": 1, "scores": [0.3, 0.1, 0.2], "ok": [True] * 3},
        {"value": 2, "scores": [0.1, 0.2, 0.3], "ok": [True] * 3},
    ]
    assert stats.analyse_curve(pts, tolerance=0.1, cap=6.0)["best"] == 1


def test_stable_range_stops_at_a_gap():
    # Within 0.2 of 3.0: indices 0, 1, 2 and 4, but index 3 (3.5) breaks the run: stable ends at index 2.
    r = stats.analyse_curve(_curve(LR, [3.1, 3.0, 3.2, 3.5, 3.1]), tolerance=0.2, cap=6.0)
    assert r["best"] == 3e-4 and r["stable"] == [1e-4, 1e-3]


def test_stable_counts_a_difference_of_exactly_the_tolerance():
    r = stats.analyse_curve(_curve([1, 2, 3], [4.1, 4.0, 4.3], seeds=1), tolerance=0.1, cap=6.0)
    assert r["stable"] == [1, 2]


def test_trainable_range_stops_at_a_failed_point():
    # Best at 1e-3; 3e-4 failed on some seed (not ok), so trainable runs 1e-3..1e-2 even though 1e-4 is ok again.
    pts = _curve(LR, [3.4, 3.6, 3.0, 3.2, 3.9])
    pts[1]["ok"] = [True, False]
    r = stats.analyse_curve(pts, tolerance=0.1, cap=6.0)
    assert r["best"] == 1e-3 and r["trainable"] == [1e-3, 1e-2]


def test_trainable_is_none_when_a_seed_at_the_best_was_not_ok():
    pts = _curve(LR, [4.0, 3.5, 3.2, 3.3, 5.0])
    pts[2]["ok"] = [True, False]
    r = stats.analyse_curve(pts, tolerance=0.05, cap=6.0)
    assert r["best"] == 1e-3 and r["trainable"] is None and r["stable"] == [1e-3, 1e-3]


def test_a_group_failing_everywhere():
    cap = 6.2383
    pts = [{"value": v, "scores": [cap, cap, cap], "ok": [False] * 3} for v in LR]
    r = stats.analyse_curve(pts, tolerance=0.1, cap=cap)
    assert r["best"] == 1e-4  # all tied: the lowest value
    assert r["best_at_edge"] is None and r["stable"] is None and r["trainable"] is None
    assert r["sensitivity"] is None
    assert r["means"] == [cap] * 5


def test_non_numeric_values_have_no_ranges_but_a_sensitivity():
    pts = _curve(["adam", "sgd", "lion"], [3.5, 3.0, 3.2])
    r = stats.analyse_curve(pts, tolerance=0.1, cap=6.0)
    assert r["best"] == "sgd"
    assert r["best_at_edge"] is None and r["stable"] is None and r["trainable"] is None
    assert r["sensitivity"] == pytest.approx((0.5 + 0.0 + 0.2) / 3)
    # Ties among non-numeric values: the first in grid order.
    assert stats.analyse_curve(_curve(["sgd", "adam"], [3.0, 3.0]), tolerance=0.1, cap=6.0)["best"] == "sgd"
    # bool is not numeric.
    assert stats.analyse_curve(_curve([False, True], [3.0, 3.2]), tolerance=0.1, cap=6.0)["stable"] is None


def test_analyse_curve_rejects_malformed_points():
    with pytest.raises(ValueError):
        stats.analyse_curve([], tolerance=0.1, cap=6.0)
    with pytest.raises(ValueError):
        stats.analyse_curve([{"value": 1, "scores": [3.0, 3.1], "ok": [True]}], tolerance=0.1, cap=6.0)


# --- frontier -------------------------------------------------------------------------------------------------

FLOPS = [1e12, 1e13, 1e14, 1e15]


def _law(c, a=50.0, alpha=0.1):
    return a * c**-alpha


def test_fit_power_law_recovers_exact_parameters():
    fit = stats.fit_power_law(FLOPS, [_law(c, 37.0, 0.07) for c in FLOPS])
    assert fit["a"] == pytest.approx(37.0, rel=1e-9) and fit["alpha"] == pytest.approx(0.07, rel=1e-9)
    assert fit["form"] == "score = a * C^-alpha"
    assert stats.compute_to_reach(fit, _law(3e14, 37.0, 0.07)) == pytest.approx(3e14, rel=1e-6)


def test_fit_power_law_needs_two_distinct_sizes():
    with pytest.raises(ValueError):
        stats.fit_power_law([1e12, 1e12], [3.0, 2.9])
    with pytest.raises(ValueError):
        stats.fit_power_law([1e12, 1e13], [3.0, 0.0])  # a zero score has no logarithm
    with pytest.raises(ValueError):
        stats.fit_power_law([1e12], [3.0])


def test_compute_to_reach_none_without_a_falling_law():
    assert stats.compute_to_reach({"a": 5.0, "alpha": 0.0}, 3.0) is None
    assert stats.compute_to_reach({"a": 5.0, "alpha": -0.1}, 3.0) is None
    # 5 * C^-0.5 = 0.5 at C = 100.
    assert stats.compute_to_reach({"a": 5.0, "alpha": 0.5}, 0.5) == pytest.approx(100.0)


def _sizes(shift, noise, rng, seeds=3):
    """One entry per size: scores on the reference law at `shift` times the compute, plus normal noise."""
    return [{"flops": c, "scores": list(_law(shift * c) + rng.normal(0.0, noise, seeds))} for c in FLOPS]


def test_a_group_needing_half_the_compute_has_multiplier_two():
    rng = np.random.default_rng(7)
    ref, group = _sizes(1.0, 0.003, rng), _sizes(2.0, 0.003, rng)
    r = stats.compute_multiplier(ref, group, n_boot=300, seed=0)
    assert r["multiplier"] == pytest.approx(2.0, rel=0.1)
    lo, hi = r["multiplier_ci95"]
    assert lo < 2.0 < hi and hi / lo < 2.0  # covers the truth, and narrow enough to mean something
    assert r["fit"]["alpha"] == pytest.approx(0.1, rel=0.1) and r["group_fit"]["alpha"] == pytest.approx(0.1, rel=0.1)
    # The same seed gives the same interval.
    assert stats.compute_multiplier(ref, group, n_boot=300, seed=0)["multiplier_ci95"] == [lo, hi]


def test_exact_curves_give_exact_multipliers():
    exact = [{"flops": c, "scores": [_law(c)] * 3} for c in FLOPS]
    half = [{"flops": c, "scores": [_law(2 * c)] * 3} for c in FLOPS]
    r = stats.compute_multiplier(exact, half, n_boot=50)
    assert r["multiplier"] == pytest.approx(2.0, rel=1e-6)
    assert r["multiplier_ci95"] == pytest.approx([2.0, 2.0], rel=1e-6)  # no spread to resample
    # Either side's spread alone widens the interval: both sides are resampled.
    rng = np.random.default_rng(5)
    lo, hi = stats.compute_multiplier(_sizes(1.0, 0.003, rng), half, n_boot=100)["multiplier_ci95"]
    assert lo < 2.0 < hi
    lo, hi = stats.compute_multiplier(exact, _sizes(2.0, 0.003, rng), n_boot=100)["multiplier_ci95"]
    assert lo < 2.0 < hi


def test_identical_groups_have_multiplier_one():
    rng = np.random.default_rng(3)
    ref = _sizes(1.0, 0.003, rng)
    r = stats.compute_multiplier(ref, ref, n_boot=300, seed=1)
    assert r["multiplier"] == pytest.approx(1.0, rel=0.1)
    lo, hi = r["multiplier_ci95"]
    assert lo < 1.0 < hi


def test_multiplier_without_enough_sizes():
    one = [{"flops": 1e12, "scores": [3.0, 3.1]}]
    r = stats.compute_multiplier(one, one)
    assert r == {"multiplier": None, "multiplier_ci95": None, "fit": None, "group_fit": None}
    # The reference spans sizes, the group only one: a multiplier, but no group fit.
    rng = np.random.default_rng(0)
    r = stats.compute_multiplier(_sizes(1.0, 0.003, rng), [{"flops": 1e15, "scores": [_law(2e15)] * 2}], n_boot=20)
    assert r["group_fit"] is None and r["multiplier"] == pytest.approx(2.0, rel=0.1)
