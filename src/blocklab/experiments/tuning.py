"""A sweep's tuned setting (docs/sweeps.md): which dotted key each group is tuned on, over which grid, with which
seeds, and the sizes a sweep repeats its experiments at.

  [tune]                        # or [experiments.NAME.tune]
  key = "train.lr"
  values = [1e-3, 3e-3, 1e-2]   # or min = 1e-4, max = 1e-2, points = 5 (log-spaced)
  seeds = [5, 6]                # default: the two integers after max(seeds), disjoint from the final seeds
  reuse = false                 # true: the tuning runs at the best value count as final seeds too
  tolerance = 0.1               # the stable range, and how far past the cap a run must end to count as trained
  extend = 2                    # a best at a grid edge adds up to this many values beyond it (same ratio)

Tuning seeds are kept apart from the final seeds by default because choosing the best of several values on
the same seeds that then judge it flatters a group with a flat curve: the winner's noise is counted as skill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, fields

from blocklab.errors import ConfigError, UserError
from blocklab.settings import setting, validate

DEFAULT_TOLERANCE = 0.1
TUNING_SEEDS = 2  # a value is trainable only where every tuning seed completed: one seed is a coin toss
DOTTED = 'a dotted setting such as "train.lr"'
NO_GRID = "none: the grid is values"


@dataclass(frozen=True)
class Tune:
    """A [tune] table, checked when built: its keys are these fields (docs/sweeps.md). Once built, `values`
    is the grid (from min, max and points when those were given) and `seeds` the tuning seeds (their default
    taken from `final_seeds`, the sweep's); `where` names the table in errors."""

    key: str = setting(
        "train.lr",
        help="the tuned setting: any dotted model./data./train. key but train.seed and model.block",
        expected=DOTTED,
    )
    values: tuple[float | str | bool, ...] | None = setting(
        None,
        help="the grid, ascending for numbers",
        derived="min, max and points",
        nonempty=True,
        distinct=True,
    )
    min: float | None = setting(
        None, help="instead of values: the grid's lowest value", derived=NO_GRID, min=0, min_exclusive=True
    )
    max: float | None = setting(
        None, help="instead of values: the grid's highest value", derived=NO_GRID, min=0, min_exclusive=True
    )
    points: int | None = setting(
        None, help="instead of values: values from min to max, evenly spaced in log", derived=NO_GRID, min=2
    )
    # Apart from the final seeds by default: choosing the best value on the seeds that then judge it counts the
    # winner's noise as skill.
    seeds: tuple[int, ...] | None = setting(
        None,
        help="the tuning seeds",
        derived="the two integers after max(seeds), apart from the sweep's final seeds",
        min=0,
        nonempty=True,
        distinct=True,
    )
    reuse: bool = setting(False, help="the tuning runs at the best value also count as final seeds")
    tolerance: float = setting(
        DEFAULT_TOLERANCE,
        help="the stable range, and how far past the cap a run must end to count as trained (else it failed)",
        unit="the metric's units",
        min=0,
        min_exclusive=True,
    )
    extend: int = setting(
        2,
        help="a best value at the grid's first or last value adds the next value beyond it (same ratio), up to "
        "this many times on each side, before any final seed",
        min=0,
    )
    final_seeds: InitVar[Sequence[int] | None] = None
    where: InitVar[str] = "tune"

    def __post_init__(self, final_seeds: Sequence[int] | None, where: str) -> None:
        validate(self, where)
        section, _, option = self.key.partition(".")
        if section not in ("model", "data", "train") or not option:
            raise ConfigError(f"{where}.key={self.key!r} is not valid; it must be {DOTTED}")
        if self.key in ("train.seed", "model.block"):
            raise ConfigError(
                f"{where}.key={self.key!r} cannot be tuned: seeds are set by `seeds`, blocks are the groups"
            )
        grid = (self.min, self.max, self.points)
        if self.values is not None:
            if any(x is not None for x in grid):
                raise ConfigError(f"{where}: give either values or min, max and points, not both")
            if all(is_number(v) for v in self.values) and list(self.values) != sorted(self.values):
                raise ConfigError(f"{where}.values={self.values!r} is not valid; it must be in ascending order")
            values = tuple(self.values)
        elif all(x is not None for x in grid):
            if self.max <= self.min:
                raise ConfigError(
                    f"{where}.max={self.max!r} is not valid; it must be above {where}.min={self.min!r} (0 < min < max)"
                )
            values = log_grid(self.min, self.max, self.points)
        else:
            raise ConfigError(f"{where} needs values = [...] or min, max and points")
        finals = list(final_seeds or [0])
        seeds = tuple(self.seeds) if self.seeds is not None else tuple(max(finals) + 1 + i for i in range(TUNING_SEEDS))
        shared = sorted(set(seeds) & set(finals))
        if shared and not self.reuse:
            raise ConfigError(
                f"{where}.seeds {list(seeds)} share seed {shared[0]} with the final seeds {finals}: choosing "
                "the best value on the seeds that then judge it flatters flat curves; pick other tuning "
                "seeds, or set reuse = true to count them (the report says so)"
            )
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "tolerance", float(self.tolerance))

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
            "extend": self.extend,
        }


TUNE_FIELDS = tuple(f.name for f in fields(Tune))


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def log_grid(lo: float, hi: float, points: int) -> tuple[float, ...]:
    """`points` values from lo to hi (0 < lo < hi), evenly spaced in log (rounded to 3 significant digits, so
    the run names and the report read 0.00316, not 0.0031622776601683794)."""
    step = (math.log(hi) - math.log(lo)) / (points - 1)
    return tuple(float(f"{math.exp(math.log(lo) + i * step):.3g}") for i in range(points))


def parse_tune(spec, final_seeds: list[int] | None, where: str = "tune") -> Tune | None:
    """A [tune] table checked and resolved (grid, default seeds); None without one."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a table: {', '.join(TUNE_FIELDS)}")
    unknown = sorted(set(spec) - set(TUNE_FIELDS))
    if unknown:
        raise UserError(f"unknown field {unknown[0]!r} in {where}; valid: {', '.join(TUNE_FIELDS)}")
    return Tune(**spec, final_seeds=final_seeds, where=where)


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
