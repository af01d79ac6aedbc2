"""A sweep's tuned setting (SPEC 10): which dotted key each group is tuned on, over which grid, with which
seeds, and the sizes a sweep repeats its experiments at.

  [tune]                        # or [experiments.NAME.tune]
  key = "train.lr"
  values = [1e-3, 3e-3, 1e-2]   # or min = 1e-4, max = 1e-2, points = 5 (log-spaced)
  seeds = [3]                   # default [max(seeds) + 1]: disjoint from the final seeds
  reuse = false                 # true: the tuning runs at the best value count as final seeds too
  tolerance = 0.1               # nats: the stable range, and how far below the cap a trainable run ends

Tuning seeds are kept apart from the final seeds by default because choosing the best of several values on
the same seeds that then judge it flatters a group with a flat curve: the winner's noise is counted as skill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blocklab.errors import UserError

TUNE_FIELDS = ("key", "values", "min", "max", "points", "seeds", "reuse", "tolerance")
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class Tune:
    key: str  # a dotted setting, e.g. "train.lr"
    values: tuple  # the grid, ascending for numbers
    seeds: tuple[int, ...]  # the tuning seeds
    reuse: bool = False
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def section(self) -> str:
        return self.key.partition(".")[0]

    @property
    def option(self) -> str:
        return self.key.partition(".")[2]

    @property
    def numeric(self) -> bool:
        return all(is_number(v) for v in self.values)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "values": list(self.values),
            "seeds": list(self.seeds),
            "reuse": self.reuse,
            "tolerance": self.tolerance,
        }


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _seeds(value, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or len(set(value)) != len(value)
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
    ):
        raise UserError(f"{where}.seeds = {value!r} is not valid; give a list of distinct integers >= 0, e.g. [3]")
    return tuple(value)


def log_grid(lo, hi, points, where: str) -> tuple[float, ...]:
    """`points` values from lo to hi, evenly spaced in log (rounded to 3 significant digits, so the run names
    and the report read 0.00316, not 0.0031622776601683794)."""
    if not (is_number(lo) and is_number(hi) and 0 < lo < hi):
        raise UserError(f"{where}: min = {lo!r}, max = {hi!r} are not valid; give 0 < min < max")
    if not isinstance(points, int) or isinstance(points, bool) or points < 2:
        raise UserError(f"{where}.points = {points!r} is not valid; give an integer >= 2")
    step = (math.log(hi) - math.log(lo)) / (points - 1)
    return tuple(float(f"{math.exp(math.log(lo) + i * step):.3g}") for i in range(points))


def parse_tune(spec, final_seeds: list[int] | None, where: str = "tune") -> Tune | None:
    """A [tune] table checked and resolved (grid, default seeds); None without one."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a table: key, values (or min, max, points), seeds, reuse, tolerance")
    unknown = sorted(set(spec) - set(TUNE_FIELDS))
    if unknown:
        raise UserError(f"unknown field {unknown[0]!r} in {where}; valid: {', '.join(TUNE_FIELDS)}")
    key = spec.get("key", "train.lr")
    section, _, option = key.partition(".") if isinstance(key, str) else ("", "", "")
    if section not in ("model", "data", "train") or not option:
        raise UserError(f'{where}.key = {key!r} is not valid; give a dotted setting such as "train.lr"')
    if key in ("train.seed", "model.block"):
        raise UserError(f"{where}.key = {key!r} cannot be tuned: seeds are set by `seeds`, blocks are the groups")
    if "values" in spec:
        if any(k in spec for k in ("min", "max", "points")):
            raise UserError(f"{where}: give either values or min, max and points, not both")
        values = spec["values"]
        if not isinstance(values, list) or not values or len({repr(v) for v in values}) != len(values):
            raise UserError(f"{where}.values = {values!r} is not valid; give a non-empty list of distinct values")
        if all(is_number(v) for v in values):
            if list(values) != sorted(values):
                raise UserError(f"{where}.values = {values!r} must be in ascending order")
        values = tuple(values)
    elif all(k in spec for k in ("min", "max", "points")):
        values = log_grid(spec["min"], spec["max"], spec["points"], where)
    else:
        raise UserError(f"{where} needs values = [...] or min, max and points")
    finals = list(final_seeds or [0])
    seeds = _seeds(spec["seeds"], where) if "seeds" in spec else (max(finals) + 1,)
    reuse = spec.get("reuse", False)
    if not isinstance(reuse, bool):
        raise UserError(f"{where}.reuse = {reuse!r} is not valid; give true or false")
    shared = sorted(set(seeds) & set(finals))
    if shared and not reuse:
        raise UserError(
            f"{where}.seeds {list(seeds)} share seed {shared[0]} with the final seeds {finals}: choosing "
            "the best value on the seeds that then judge it flatters flat curves; pick other tuning "
            "seeds, or set reuse = true to count them (the report says so)"
        )
    tolerance = spec.get("tolerance", DEFAULT_TOLERANCE)
    if not is_number(tolerance) or tolerance <= 0:
        raise UserError(f"{where}.tolerance = {tolerance!r} is not valid; give a positive number (metric units)")
    return Tune(key, values, seeds, reuse, float(tolerance))


def parse_sizes(spec, where: str = "sizes") -> list[dict]:
    """[[sizes]]: each a table of dotted overrides (one model size and its steps)."""
    if spec is None:
        return []
    if not isinstance(spec, list) or not spec or not all(isinstance(s, dict) and s for s in spec):
        raise UserError(f'{where} must be a list of tables of dotted settings, e.g. [[sizes]] "model.d_model" = 64')
    for i, size in enumerate(spec):
        for key in size:
            section, _, option = key.partition(".")
            if section not in ("model", "data", "train") or not option:
                raise UserError(f'{where}[{i}]: {key!r} is not a dotted setting such as "model.d_model"')
    return [dict(s) for s in spec]


def value_text(value) -> str:
    """A grid value in a run name or a table: 0.001, 0.003, 1e-05, adam."""
    return f"{value:g}" if isinstance(value, float) else str(value)
