"""blocklab.stats.curve: a tuning curve's best value, ranges and sensitivity with failed seeds counted apart, and
the value beyond a grid edge."""

import pytest

from blocklab import stats

LR = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
CAP = 6.0


def _curve(values, means, failed=None, seeds=2):
    """Grid points whose seeds are mean +- 0.01; `failed`: {index: how many seeds failed there (None scores)}."""
    out = []
    for i, (v, m) in enumerate(zip(values, means)):
        scores = [m - 0.01, m + 0.01][:seeds]
        for k in range((failed or {}).get(i, 0)):
            scores[k] = None
        out.append({"value": v, "scores": scores})
    return out


def test_interior_best():
    r = stats.analyse_curve(_curve(LR, [4.0, 3.5, 3.2, 3.3, 5.0]), tolerance=0.15, cap=CAP)
    assert r["best"] == 1e-3 and r["best_at_edge"] is False
    assert r["stable"] == [1e-3, 3e-3] and r["trainable"] == [1e-4, 1e-2]
    assert r["means"] == pytest.approx([4.0, 3.5, 3.2, 3.3, 5.0])
    assert r["sensitivity"] == pytest.approx((0.8 + 0.3 + 0.0 + 0.1 + 1.8) / 5)


def test_a_value_with_a_failed_seed_is_never_best_and_ends_the_trainable_range():
    # 3e-3 has the best mean over its completed seed, but one seed failed there: not eligible, not trainable.
    pts = _curve(LR, [4.0, 3.5, 3.2, 3.0, 5.0], failed={3: 1})
    r = stats.analyse_curve(pts, tolerance=0.1, cap=CAP)
    assert r["means"][3] == pytest.approx(3.01)  # the mean of its completed seed
    assert r["best"] == 1e-3 and r["trainable"] == [1e-4, 1e-3]
    # sensitivity: the failed value at the cap
    assert r["sensitivity"] == pytest.approx((0.8 + 0.3 + 0.0 + (CAP - 3.2) + 1.8) / 5)


def test_best_at_either_edge_and_a_single_value():
    low = stats.analyse_curve(_curve(LR, [3.0, 3.5, 4.0, 4.5, 5.0]), tolerance=0.1, cap=CAP)
    assert low["best"] == 1e-4 and low["best_at_edge"] is True and low["stable"] == [1e-4, 1e-4]
    high = stats.analyse_curve(_curve(LR, [5.0, 4.5, 4.0, 3.5, 3.0]), tolerance=0.1, cap=CAP)
    assert high["best"] == 1e-2 and high["best_at_edge"] is True
    single = stats.analyse_curve(_curve([1e-3], [3.0]), tolerance=0.1, cap=CAP)
    assert single["best_at_edge"] is True and single["sensitivity"] == 0.0


def test_higher_is_better_and_ties():
    r = stats.analyse_curve(_curve(LR, [10.0, 20.0, 25.0, 24.0, 5.0]), tolerance=2.0, cap=0.0, lower_is_better=False)
    assert r["best"] == 1e-3 and r["stable"] == [1e-3, 3e-3]
    assert stats.analyse_curve(_curve(LR, [4.0, 3.2, 3.5, 3.2, 4.0]), tolerance=0.1, cap=CAP)["best"] == 3e-4
    pts = [{"value": 1, "scores": [0.3, 0.1, 0.2]}, {"value": 2, "scores": [0.1, 0.2, 0.3]}]
    assert stats.analyse_curve(pts, tolerance=0.1, cap=CAP)["best"] == 1  # same mean in another order: a tie


def test_stable_range_stops_at_a_gap_and_counts_exactly_the_tolerance():
    r = stats.analyse_curve(_curve(LR, [3.1, 3.0, 3.2, 3.5, 3.1]), tolerance=0.2, cap=CAP)
    assert r["best"] == 3e-4 and r["stable"] == [1e-4, 1e-3]
    r = stats.analyse_curve(_curve([1, 2, 3], [4.1, 4.0, 4.3], seeds=1), tolerance=0.1, cap=CAP)
    assert r["stable"] == [1, 2]


def test_a_group_failing_everywhere_has_no_best():
    pts = [{"value": v, "scores": [None, None]} for v in LR]
    r = stats.analyse_curve(pts, tolerance=0.1, cap=CAP)
    assert r["best"] is None and r["trainable"] is None and r["sensitivity"] is None
    assert r["means"] == [None] * 5
    # completed on one seed somewhere is still no complete value
    pts[2]["scores"] = [4.0, None]
    assert stats.analyse_curve(pts, tolerance=0.1, cap=CAP)["best"] is None


def test_non_numeric_values_have_no_ranges():
    r = stats.analyse_curve(_curve(["adam", "sgd", "lion"], [3.5, 3.0, 3.2]), tolerance=0.1, cap=CAP)
    assert r["best"] == "sgd" and r["best_at_edge"] is None and r["stable"] is None
    assert r["sensitivity"] == pytest.approx((0.5 + 0.0 + 0.2) / 3)
    assert stats.analyse_curve(_curve([False, True], [3.0, 3.2]), tolerance=0.1, cap=CAP)["stable"] is None
    with pytest.raises(ValueError):
        stats.analyse_curve([], tolerance=0.1, cap=CAP)


def test_next_value_keeps_the_grids_pattern():
    assert stats.next_value([1e-3, 3e-3, 1e-2], "low") == 3e-4
    assert stats.next_value([1e-3, 3e-3, 1e-2], "high") == 3e-2
    assert stats.next_value([3e-4, 1e-3, 3e-3, 1e-2, 3e-2], "high") == 0.1
    assert stats.next_value([1e-4, 2e-4, 4e-4], "low") == 5e-5  # a geometric grid: its ratio
    assert stats.next_value([10, 20, 40], "high") == 80 and isinstance(stats.next_value([10, 20, 40], "high"), int)
    assert stats.next_value([1e-3, 1e-2], "low") == 1e-4
    for grid in ([1e-3], [0, 10, 100], ["adam", "sgd"], [True, False]):
        assert stats.next_value(grid, "low") is None
    with pytest.raises(ValueError):
        stats.next_value(LR, "middle")
