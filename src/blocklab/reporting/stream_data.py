"""The residual-stream probes of a part's runs, read (RUN/stream_probes.json, written by
experiments/stream_probes.py) and reduced to the arrays reporting/stream.py draws: means over seeds, the
sub-layers shown, the maps with unread sources masked. No matplotlib here, so tests check the numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blocklab.reporting.runs import Run
from blocklab.training.rundir import STREAM_PROBES

HC_BLOCKS = ("hyper-connections", "mhc")
DEPTH_BLOCKS = ("attn-res", "denseformer")
MOMENTS = (("init", "at init"), ("final", "after training"))
MOST_SUBLAYERS = 8  # mixing-matrix columns: more would shrink each map below reading size
SKIP = (KeyError, TypeError, ValueError, IndexError)  # a file of another version: leave its figure out


@dataclass
class ProbedGroup:
    """A seed group's runs that have a readable stream_probes.json; `data[0]` is its first seed's."""

    group: str
    label: str
    block: str
    runs: list[Run] = field(default_factory=list)
    data: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.label} [{self.block}]"


def read_stream_probes(run: Path) -> dict | None:
    """RUN/stream_probes.json when readable and holding both moments; None otherwise."""
    try:
        data = json.loads((Path(run) / STREAM_PROBES).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and all(isinstance(data.get(m), dict) for m, _ in MOMENTS)
    return data if ok else None


def probed_groups(runs: list[Run]) -> list[ProbedGroup]:
    """The groups with probe files, in the runs' order; each group's runs by seed (None last)."""
    found = [(r, d) for r in runs if r.exists and (d := read_stream_probes(r.path)) is not None]
    out = {r.group: ProbedGroup(r.group, r.group_label, r.block) for r, _ in found}
    for r, d in sorted(found, key=lambda t: (t[0].seed is None, t[0].seed or 0)):
        out[r.group].runs.append(r)
        out[r.group].data.append(d)
    return list(out.values())


def _at(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def seed_mean(values) -> np.ndarray | None:
    """The element-wise mean of the seeds' lists (None entries: NaN); None when no seed has one or their
    lengths differ (files of different depths cannot be averaged)."""
    arrays = [np.asarray(v, dtype=float) for v in values if v is not None]
    if not arrays or any(a.shape != arrays[0].shape for a in arrays):
        return None
    return np.mean(arrays, axis=0)


def curve(g: ProbedGroup, moment: str, *keys: str) -> np.ndarray | None:
    """The measure at `keys` of `moment` (hidden_sq_norm: mean |x_l|^2, l = 0..L; low_rank_ratio: per
    sub-layer), the mean over the group's seeds."""
    return seed_mean(_at(d, moment, *keys) for d in g.data)


def composite_gain(g: ProbedGroup, moment: str, direction: str = "forward") -> np.ndarray | None:
    """The composite gain per sub-layer (mean over tokens), the mean over seeds."""
    return curve(g, moment, "mixing", "gain", f"composite_{direction}")


def gain_peak(g: ProbedGroup, moment: str = "final") -> tuple[float, int, float, bool] | None:
    """(largest seed-mean composite forward gain, its sub-layer, the largest on any one token of any seed and
    sub-layer, whether the mean curve is flat within 0.01); None without gains."""
    mean = composite_gain(g, moment)
    if mean is None or not len(mean):
        return None
    k = int(np.argmax(mean))
    tokens = [max(v) for d in g.data if (v := _at(d, moment, "mixing", "gain", "composite_forward_max"))]
    return float(mean[k]), k, float(max(tokens, default=mean[k])), float(np.ptp(mean)) < 0.01


def pick_sublayers(count: int, most: int = MOST_SUBLAYERS) -> list[int]:
    """At most `most` sub-layers of `count`, evenly spaced, the first and the last always among them."""
    if count <= most:
        return list(range(count))
    return sorted({int(round(x)) for x in np.linspace(0, count - 1, most)})


def mixing_panels(g: ProbedGroup) -> list[tuple[int, np.ndarray]]:
    """[(sub-layer, trained residual matrix n x n)] of the group's first seed, the picked sub-layers."""
    mats = _at(g.data[0], "final", "mixing", "residual") or []
    return [(k, np.asarray(mats[k], dtype=float)) for k in pick_sublayers(len(mats))]


def depth_map(data: dict, moment: str) -> tuple[list[str], list[str], np.ndarray] | None:
    """(row names, column names, weights with NaN where the source is not read) of one file and moment."""
    dw = _at(data, moment, "depth_weights")
    if not isinstance(dw, dict) or not dw.get("weights"):
        return None
    return list(dw["rows"]), list(dw["cols"]), np.asarray(dw["weights"], dtype=float)


def lambda_table(lams) -> np.ndarray | None:
    """ResFormer's per-layer [lambda_1, lambda_2] as an (L, 2) array, NaN for layer 1 (which has none)."""
    if not isinstance(lams, list):
        return None
    return np.array([[math.nan, math.nan] if x is None else x for x in lams], dtype=float)


def value_lambdas(g: ProbedGroup, moment: str) -> np.ndarray | None:
    return seed_mean(lambda_table(_at(d, moment, "value_lambdas")) for d in g.data)


def lambdas_fixed(g: ProbedGroup) -> bool:
    """Every seed's lambdas unchanged between init and final: the run did not train them."""
    pairs = [[lambda_table(_at(d, m, "value_lambdas")) for m, _ in MOMENTS] for d in g.data]
    return all(a is not None and b is not None and np.allclose(a, b, equal_nan=True) for a, b in pairs)


def head_means(per_layer) -> list | None:
    """[per layer [per head]] -> per layer the mean over heads (None entries, ungated layers, stay None)."""
    if not isinstance(per_layer, list):
        return None
    return [None if heads is None else float(np.mean(heads)) for heads in per_layer]


def sink_curve(g: ProbedGroup, moment: str) -> np.ndarray | None:
    """The first-token attention mass per layer (mean over heads), the mean over seeds."""
    return seed_mean(head_means(_at(d, moment, "attention", "first_token_mass")) for d in g.data)


def gate_curve(g: ProbedGroup, moment: str) -> np.ndarray | None:
    """The gate's mean per layer (mean over heads), the mean over seeds; None for an ungated group."""
    return seed_mean(head_means(_at(d, moment, "attention", "gate_mean")) for d in g.data)


def uniform_level(g: ProbedGroup) -> float | None:
    """The first-token mass of evenly spread attention on the probes' batch (the same for every run of a part)."""
    levels = [v for d in g.data if isinstance(v := _at(d, "final", "attention", "uniform"), (int, float))]
    return float(levels[0]) if levels else None
