"""blocklab.stats.frontier: the power law of score against compute and the compute multiplier, checked against
exact curves and known shifts."""

import numpy as np
import pytest

from blocklab import stats

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
