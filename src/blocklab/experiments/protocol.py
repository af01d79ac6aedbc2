"""A sweep's [compare] and [power] tables (docs/sweeps.md): the equivalence margin, and how `seeds = "auto"` chooses
the number of final seeds.

  [compare]             # or [experiments.NAME.compare]
  margin = 0.1          # equivalence and non-inferiority margin, in the metric's units
  [power]               # used when seeds = "auto"
  mde = 0.1             # the difference to detect, in the metric's units
  power = 0.8
  min_seeds = 3
  max_seeds = 10

With `seeds = "auto"`, compare first runs `min_seeds` final seeds of every group, estimates the pooled
within-group standard deviation of each experiment over all its groups (never from the differences: a count
chosen from them would chase the effect), and runs as many more as a paired test needs to detect `mde` with
`power` at the family's level, at most `max_seeds`.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, fields

from blocklab import stats
from blocklab.errors import ConfigError, UserError
from blocklab.settings import setting, validate

DEFAULT_MARGIN = 0.1
FINAL_SEEDS = 5  # the final seeds of a tuned sweep that names none: a paired test survives one failed seed


@dataclass(frozen=True)
class Compare:
    margin: float = setting(
        DEFAULT_MARGIN,
        help="equivalence and non-inferiority margin: differences within it count as none",
        unit="the metric's units",
        min=0,
        min_exclusive=True,
    )
    where: InitVar[str] = "compare"

    def __post_init__(self, where: str):
        validate(self, where)
        object.__setattr__(self, "margin", float(self.margin))


@dataclass(frozen=True)
class Power:
    mde: float = setting(
        0.1, help="the difference the final seeds must detect", unit="the metric's units", min=0, min_exclusive=True
    )
    power: float = setting(
        0.8, help="the probability of detecting mde", min=0, max=1, min_exclusive=True, max_exclusive=True
    )
    min_seeds: int = setting(3, help="final seeds of the first round, from which the spread is estimated", min=2)
    max_seeds: int = setting(10, help="the most final seeds a group gets", min=2)
    where: InitVar[str] = "power"

    def __post_init__(self, where: str):
        validate(self, where)
        if self.max_seeds < self.min_seeds:
            raise ConfigError(
                f"{where}.max_seeds={self.max_seeds} is not valid; it must be at least min_seeds={self.min_seeds}"
            )

    def to_json(self) -> dict:
        return {"mde": self.mde, "power": self.power, "min_seeds": self.min_seeds, "max_seeds": self.max_seeds}


def _table(cls, spec, where: str):
    if spec is None:
        return cls(where=where)
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a table: {', '.join(f.name for f in fields(cls))}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise UserError(f"unknown field {unknown[0]!r} in {where}; valid: {', '.join(known)}")
    return cls(**spec, where=where)


def parse_compare(spec, where: str = "compare") -> Compare:
    return _table(Compare, spec, where)


def parse_power(spec, where: str = "power") -> Power:
    return _table(Power, spec, where)


def auto_count(samples: list[list[float]], power: Power, family_size: int) -> dict:
    """How many final seeds an experiment needs, from its first round's completed scores (`samples`: one list
    per group): the record verdicts.json keeps (`seeds_auto`)."""
    sd, df = stats.pooled_sd(samples)
    alpha = stats.ALPHA / max(1, family_size)
    out = {**power.to_json(), "pooled_sd": sd, "sd_df": df, "family_size": family_size, "alpha": alpha}
    if sd is None:
        return out | {"seeds": power.max_seeds, "reached": None, "why": "no group completed two seeds: the most"}
    n, reached = stats.seeds_needed(sd, power.mde, alpha, power.power, power.min_seeds, power.max_seeds)
    why = "detects mde with the asked power" if reached >= power.power else "the most allowed (power not reached)"
    return out | {"seeds": n, "reached": reached, "why": why}
