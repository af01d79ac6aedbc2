"""A sweep's tables as written (a preset or a SWEEP.toml, docs/sweeps.md): dotted keys nested, each experiment's
`common` settings spread over its runs, the `experiments` table and the seeds checked, one experiment picked out,
the groups its [grid] and [[runs]] define. experiments/sweep.py builds the runs from them."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from blocklab.errors import UserError
from blocklab.experiments.protocol import parse_compare
from blocklab.experiments.tuning import parse_tune

# An experiment's name: it names the report's section ids and figure files (loss_vs_step_NAME.png).
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
EXPERIMENT_KEYS = ("title", "description", "target_run", "tune", "compare", "factor", "common")
SWEEP_FIELDS = frozenset(
    "name description base grid runs probes expected_cost target_run seeds finetune reference experiments "
    "grid_experiment tune sizes eval compare power factor".split()
)
# The short forms of settings in run and group names ("pre-ln_lr0.001_s0"); "" leaves only the value.
SHORT = {
    "model.block": "",
    "train.lr": "lr",
    "train.warmup_steps": "wu",
    "train.seed": "s",
    "model.n_layers": "L",
    "model.d_model": "d",
    "train.optimizer": "",
    "model.norm": "",
    "model.init": "",
}


@dataclass
class GroupSpec:
    """A block and its other settings: what the sweep compares. Its runs differ in seed, size and tuned value."""

    name: str
    label: str
    overrides: dict  # nested, the group's own settings
    experiment: str | None = None
    recipe: dict = field(default_factory=dict)  # the block recipe's values in effect (dotted)

    @property
    def settings(self) -> dict:
        """The dotted settings that set this group apart (its own and its recipe's), as verdicts.json lists them."""
        own = {f"{s}.{k}": v for s, values in self.overrides.items() for k, v in values.items()}
        return {**self.recipe, **own}


def nest(flat: dict) -> dict:
    """{'model.block': 'sas'} -> {'model': {'block': 'sas'}}."""
    out: dict = {}
    for key, value in flat.items():
        section, _, name = key.partition(".")
        if not name:
            raise UserError(f"sweep key {key!r} must look like section.option (e.g. model.block)")
        out.setdefault(section, {})[name] = value
    return out


def with_common(spec: dict) -> dict:
    """Each experiment's `common` settings written into every one of its [[runs]] entries, under the entry's own
    (as if each entry named them: over the block recipe, as a group's own settings are)."""
    table = spec.get("experiments")
    if not isinstance(table, dict) or not any(isinstance(m, dict) and "common" in m for m in table.values()):
        return spec
    common = {}
    for name, meta in table.items():
        if isinstance(meta, dict) and "common" in meta:
            if not isinstance(meta["common"], dict):
                raise UserError(
                    f'experiments.{name}.common must be a table of dotted settings, e.g. "model.n_layers" = 6'
                )
            common[name] = _dotted(meta["common"])
    runs = [dict(common.get(r.get("experiment"), {}), **r) for r in spec.get("runs", [])]
    experiments = {
        n: {k: v for k, v in m.items() if k != "common"} if isinstance(m, dict) else m for n, m in table.items()
    }
    return dict(spec, runs=runs, experiments=experiments)


def _dotted(table: dict, prefix: str = "") -> dict:
    """{"model": {"n_layers": 6}} or {"model.n_layers": 6} -> {"model.n_layers": 6}."""
    out = {}
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_dotted(v, key))
        else:
            out[key] = v
    return out


def auto_seeds(spec: dict, count: int) -> list[int]:
    """With seeds = "auto": the final seeds it may run, the first `count` integers that no tuning table names."""
    tables = [spec.get("tune")] + [
        m.get("tune") for m in (spec.get("experiments") or {}).values() if isinstance(m, dict)
    ]
    taken = {s for t in tables if isinstance(t, dict) for s in t.get("seeds") or [] if isinstance(s, int)}
    return [s for s in range(count + len(taken)) if s not in taken][:count]


def compares(spec: dict) -> dict:
    found = {None: parse_compare(spec.get("compare"), "compare")}
    table = spec.get("experiments")
    for name, meta in table.items() if isinstance(table, dict) else ():
        if isinstance(meta, dict) and meta.get("compare") is not None:
            found[name] = parse_compare(meta["compare"], f"experiments.{name}.compare")
    return found


def tunes(spec: dict, seeds) -> dict:
    tunes = {}
    top = parse_tune(spec.get("tune"), seeds, "tune")
    if top is not None:
        tunes[None] = top
    table = spec.get("experiments")
    for name, meta in table.items() if isinstance(table, dict) else ():
        t = parse_tune(meta.get("tune"), seeds, f"experiments.{name}.tune") if isinstance(meta, dict) else None
        if t is not None:
            tunes[name] = t
    return tunes


def check_experiments(spec: dict, runs: list) -> dict | None:
    """The sweep's `experiments` table, checked against its runs (experiments/sweep.py's GroupSpecs), as
    {name: {title, description, target_run}} (None without one). A sweep with experiments tags every run: `[[runs]]` with `experiment = NAME`, grid runs
    with the sweep's `grid_experiment = NAME`; each experiment's `target_run` is one of its own runs."""
    table, grid_exp = spec.get("experiments"), spec.get("grid_experiment")
    if table is None:
        tagged = next((r for r in runs if r.experiment is not None), None)
        if tagged is not None:
            raise UserError(
                f"run {tagged.label!r} names experiment {tagged.experiment!r}, but the sweep has no "
                "[experiments] table; add one or drop the run's experiment"
            )
        return None
    if not isinstance(table, dict) or not table:
        raise UserError(
            "experiments must be a non-empty table of experiments, e.g. "
            '[experiments.he] title = "He & Hofmann" target_run = "pre-ln"'
        )
    if spec.get("target_run") is not None:
        raise UserError("target_run and [experiments] do not go together; give each experiment its own target_run")
    if grid_exp is not None and not spec.get("grid"):
        raise UserError(f"grid_experiment = {grid_exp!r} but the sweep has no [grid]")
    out = {}
    for name, meta in table.items():
        if not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name):
            raise UserError(f"experiment name {name!r} is not valid; use letters, digits, '-' and '_'")
        if not isinstance(meta, dict):
            raise UserError(f"experiments.{name} must be a table with {', '.join(EXPERIMENT_KEYS)}")
        unknown = sorted(set(meta) - set(EXPERIMENT_KEYS))
        if unknown:
            raise UserError(f"unknown field {unknown[0]!r} in experiments.{name}; valid: {', '.join(EXPERIMENT_KEYS)}")
        for key in EXPERIMENT_KEYS[:3]:  # the texts; `tune` is a table (experiments/tuning.py)
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise UserError(f"experiments.{name}.{key} = {meta[key]!r} must be a string")
        out[name] = {
            "title": meta.get("title") or name,
            "description": meta.get("description") or "",
            "target_run": meta.get("target_run"),
        }
    for r in runs:
        if r.experiment is None:
            raise UserError(
                f"run {r.label!r} names no experiment; give it experiment = NAME, one of "
                f"{', '.join(out)} (grid runs: the sweep's grid_experiment = NAME)"
            )
        if r.experiment not in out:
            raise UserError(
                f"run {r.label!r}: experiment {r.experiment!r} is not one of the sweep's experiments: {', '.join(out)}"
            )
    for name, meta in out.items():
        groups = list(dict.fromkeys(r.name for r in runs if r.experiment == name))
        if not groups:
            raise UserError(f"experiment {name!r} has no runs; tag its runs with experiment = {name!r}")
        if meta["target_run"] is not None and meta["target_run"] not in groups:
            raise UserError(
                f"experiments.{name}.target_run {meta['target_run']!r} is not a run of that "
                f"experiment; its runs: {', '.join(groups)}"
            )
    return out


def check_seeds(seeds) -> None:
    if (
        not isinstance(seeds, list)
        or not seeds
        or len(set(seeds)) != len(seeds)
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)
    ):
        raise UserError(
            f'seeds = {seeds!r} is not valid; give a list of distinct integers >= 0, e.g. [0, 1, 2, 3, 4], or "auto"'
        )


def only_experiments(spec: dict, names: list[str]) -> dict:
    """The sweep `spec` with only the experiments `names` and their runs (one part of a larger sweep, run alone)."""
    table = spec.get("experiments")
    if not isinstance(table, dict):
        raise UserError("--experiments needs a sweep with [experiments]; this one has a single experiment")
    unknown = [n for n in names if n not in table]
    if unknown:
        raise UserError(
            f"--experiments {unknown[0]!r} is not an experiment of the sweep; its experiments: {', '.join(table)}"
        )
    runs = [r for r in spec.get("runs", []) if r.get("experiment") in names]
    out = dict(spec, experiments={n: table[n] for n in names}, runs=runs)
    if spec.get("grid") and spec.get("grid_experiment") not in names:
        out.pop("grid", None)
        out.pop("grid_experiment", None)
    return out


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def slug(text: str) -> str:
    """A run or group name: anything but letters, digits, '_', '.' and '-' made a '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def groups_of(spec: dict) -> list[GroupSpec]:
    """The groups a sweep's [grid] (every combination of its values) and [[runs]] define, in that order."""
    grid = spec.get("grid", {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"grid.{key} must be a non-empty list")
    keys = list(grid)
    groups = []
    for combo in itertools.product(*(grid[k] for k in keys)) if keys else []:
        flat = dict(zip(keys, combo))
        parts = [f"{SHORT.get(k, k.split('.')[-1])}{_fmt(v)}" for k, v in flat.items() if len(grid[k]) > 1]
        label = ", ".join(parts) or spec.get("name", "run")
        groups.append(GroupSpec(slug("_".join(parts)) or "run", label, nest(flat), spec.get("grid_experiment")))
    for i, extra_run in enumerate(spec.get("runs", [])):
        extra_run = dict(extra_run)
        label = extra_run.pop("label", None) or extra_run.get("name") or f"run {i}"
        experiment = extra_run.pop("experiment", None)
        groups.append(GroupSpec(slug(extra_run.pop("name", None) or label), label, nest(extra_run), experiment))
    if not groups:
        raise UserError("the sweep defines no runs: give a [grid] and/or [[runs]]")
    return groups
