"""The statistics of a fair comparison (docs/verdicts.md): plain functions on lists of floats, no torch, so a
sweep's verdicts can be recomputed from the per-seed scores that verdicts.json stores."""

from blocklab.stats.basic import floats, mean_sd, paired_se, pooled_sd, same, t_interval, t_quantile, within
from blocklab.stats.curve import analyse_curve, next_value, numeric
from blocklab.stats.frontier import compute_multiplier, compute_to_reach, fit_power_law
from blocklab.stats.power import mde, power, seeds_needed
from blocklab.stats.significance import (
    boschloo,
    correlation,
    equivalence_p,
    holm,
    holm_levels,
    interval,
    paired,
    welch,
)
from blocklab.stats.words import ALPHA, TESTED, WORDS, verdict

__all__ = [
    "ALPHA",
    "TESTED",
    "WORDS",
    "analyse_curve",
    "boschloo",
    "compute_multiplier",
    "compute_to_reach",
    "correlation",
    "equivalence_p",
    "fit_power_law",
    "floats",
    "holm",
    "holm_levels",
    "interval",
    "mde",
    "mean_sd",
    "next_value",
    "numeric",
    "paired",
    "paired_se",
    "pooled_sd",
    "power",
    "same",
    "seeds_needed",
    "t_interval",
    "t_quantile",
    "verdict",
    "welch",
    "within",
]
