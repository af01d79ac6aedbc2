"""The sensitivity and frontier figures draw what verdicts.json holds, artist by artist (each artist that stands
for a group carries a gid: "curve:GROUP", "seeds:GROUP", "capped:GROUP", "best:GROUP", "fit:GROUP", "cap")."""

import copy

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from blocklab.reporting.figures import block_colour
from blocklab.reporting.sensitivity import draw_frontier, draw_sensitivity
from tests.reporting.fake_verdicts import CAP, LRS, verdicts


def axes():
    return Figure().subplots()


def by_gid(artists, prefix):
    return {a.get_gid().split(":", 1)[1]: a for a in artists if (a.get_gid() or "").startswith(prefix)}


def test_sensitivity_one_line_per_group_on_a_log_axis():
    exp = verdicts()["experiments"]["xiong"]
    ax = axes()
    assert draw_sensitivity(ax, exp) == 3
    assert ax.get_xscale() == "log"
    curves = by_gid(ax.lines, "curve:")
    assert list(curves) == ["post-ln_wu0", "pre-ln_wu0", "post-ln_wu"]
    assert list(curves["pre-ln_wu0"].get_xdata()) == LRS and list(curves["pre-ln_wu0"].get_ydata()) == [3.9, 3.7, 3.8]
    # colours from the block, a second line style for the second group of the same block
    assert to_hex(curves["pre-ln_wu0"].get_color()) == block_colour("pre-ln").lower()
    assert curves["post-ln_wu0"].get_linestyle() != curves["post-ln_wu"].get_linestyle()
    assert [ln.get_ydata()[0] for ln in ax.lines if ln.get_gid() == "cap"] == [CAP]
    assert "cap: unigram loss 5.5 (a run ending near it failed)" in ax.get_legend_handles_labels()[1]
    # capped seeds drawn at the cap with an x: all three of the failed group, the last value of the warm-up one
    capped = by_gid(ax.collections, "capped:")
    assert sorted(capped) == ["post-ln_wu", "post-ln_wu0"]
    assert np.allclose(capped["post-ln_wu0"].get_offsets(), [[lr, CAP] for lr in LRS])
    assert np.allclose(capped["post-ln_wu"].get_offsets(), [[1e-2, CAP]])
    assert np.allclose(by_gid(ax.collections, "seeds:")["post-ln_wu"].get_offsets(), [[1e-3, 3.9], [3e-3, 3.75]])
    # the best starred, except for the group whose best mean is the cap (no best there)
    best = by_gid(ax.collections, "best:")
    assert sorted(best) == ["post-ln_wu", "pre-ln_wu0"] and np.allclose(best["pre-ln_wu0"].get_offsets(), [[3e-3, 3.7]])
    assert (
        ax.get_title() == "Final eval loss against train.lr, each group tuned on seed 3 (star: best; x: a failed seed)"
    )


def test_band_spans_the_seeds():
    exp = copy.deepcopy(verdicts()["experiments"]["he"])
    for p, lo in zip(exp["groups"]["pre-ln"]["curve"], (3.6, 3.5, 3.7)):  # a second tuning seed below the first
        p["seeds"], p["scores"], p["statuses"], p["capped"] = [3, 4], [p["scores"][0], lo], ["completed"] * 2, [0, 0]
    ax = axes()
    draw_sensitivity(ax, exp)
    band = by_gid(ax.collections, "band:")["pre-ln"]
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(3.5) and ys.max() == pytest.approx(3.9)
    assert "at the largest size" in ax.get_title()  # the experiment has sizes


def test_categorical_values_when_not_all_positive_numbers():
    exp = copy.deepcopy(verdicts()["experiments"]["he"])
    exp["tuned"], exp["values"] = "train.warmup_steps", [0, 100, 1000]
    for g in exp["groups"].values():
        for p, v in zip(g["curve"], exp["values"]):
            p["value"] = v
        g["best"] = 100
    ax = axes()
    assert draw_sensitivity(ax, exp) == 3
    assert ax.get_xscale() == "linear" and [t.get_text() for t in ax.get_xticklabels()] == ["0", "100", "1000"]
    assert list(by_gid(ax.lines, "curve:")["sas"].get_xdata()) == [0.0, 1.0, 2.0]


def test_frontier_points_intervals_and_fits():
    exp = verdicts()["experiments"]["he"]
    ax = axes()
    assert draw_frontier(ax, exp) == 2
    assert ax.get_xscale() == "log"
    fits = by_gid(ax.lines, "fit:")
    assert sorted(fits) == ["pre-ln", "sas"]
    xs, ys = fits["sas"].get_xdata(), fits["sas"].get_ydata()
    assert np.allclose(ys, 9.8 * xs**-0.035)  # score = a * C^-alpha
    points = by_gid(ax.lines, "points:")
    assert np.allclose(points["pre-ln"].get_xdata(), [1e12, 8e12]) and np.allclose(
        points["pre-ln"].get_ydata(), [4.05, 3.55]
    )
    bars = [c for c in ax.collections if c.get_segments()]  # the error bars: from ci95's low to its high
    spans = sorted((round(s[0][1], 6), round(s[1][1], 6)) for c in bars for s in c.get_segments())
    assert (3.8, 4.3) in spans and (3.3, 3.8) in spans
    assert ax.get_title() == ("Final eval loss against training FLOPs at each size (each point at its own best lr)")
