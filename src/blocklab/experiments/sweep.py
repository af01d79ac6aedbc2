"""Sweeps: a base run config, a grid and/or a list of runs (the groups); each run is an ordinary, resumable training
run. A tuned experiment (docs/verdicts.md#tuning-each-group-at-its-own-best-value, experiments/tuning.py) runs each
group over its grid on the tuning seeds, then at its own best value on the final seeds: `Sweep.final_runs(best)` names
those runs once the best values are known."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.errors import UserError
from blocklab.experiments.downstream import FinetuneStage, parse_stage
from blocklab.experiments.evaluation import EvalStage, parse_eval
from blocklab.experiments.factors import expand_factors
from blocklab.experiments.protocol import FINAL_SEEDS, Compare, Power, parse_power
from blocklab.experiments.sweep_tables import (
    SHORT,
    SWEEP_FIELDS,
    GroupSpec,
    auto_seeds,
    check_experiments,
    check_seeds,
    compares,
    groups_of,
    nest,
    only_experiments,
    slug,
    tunes,
    with_common,
)
from blocklab.experiments.tuning import Tune, parse_sizes, value_text
from blocklab.registry import block_recipe
from blocklab.run_summary import read_summary, summary_path
from blocklab.training.config import RunConfig, load_config, read_toml

AUTO = "auto"  # seeds = "auto": the count of final seeds chosen from a first round (experiments/protocol.py)


@dataclass
class RunSpec:
    name: str
    label: str
    overrides: dict  # {"model": {...}, "train": {...}} on top of the sweep's base
    config: RunConfig | None = None
    group: str = ""  # runs that differ only in their seed share a group (the report averages them)
    group_label: str = ""
    seed: int | None = None
    experiment: str | None = None  # a key of Sweep.experiments: the report's part this run belongs to
    value: object = None  # the tuned setting's value (tuned experiments)
    size: int | None = None  # index into Sweep.sizes
    phase: str = "final"  # "tune": a tuning run; "final": a run the verdicts are computed from

    def __post_init__(self):
        self.group = self.group or self.name
        self.group_label = self.group_label or self.label

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "dir": f"runs/{self.name}",
            "label": self.label,
            "overrides": self.overrides,
            "group": self.group,
            "group_label": self.group_label,
            "seed": self.seed,
            "experiment": self.experiment,
        }
        if self.phase == "tune" or self.value is not None or self.size is not None:
            out.update(value=self.value, size=self.size)
        return out


@dataclass
class Sweep:
    name: str
    description: str = ""
    base: dict = field(default_factory=dict)
    runs: list[RunSpec] = field(default_factory=list)  # known before training: untuned runs, then tuning runs
    probes: dict | None = None  # arguments of `blocklab probe` (key -> value), run once per sweep
    expected_cost: str = ""
    target_run: str | None = None  # the report's steps-to-target uses this run's final loss (a group name)
    seeds: list[int] | str | None = None  # final seeds (train.seed), or "auto" (experiments/protocol.py)
    finetune: FinetuneStage | None = None  # fine-tune every (mlm) run afterwards (experiments/downstream.py)
    reference: dict | None = None  # the paper's numbers the report sets beside ours (reporting/downstream.py)
    # {name: {"title", "description", "target_run"}}: the experiments the sweep holds, each reported on its own
    # (its runs, table, figures and target); None: one experiment, reported as a whole (experiments.py)
    experiments: dict | None = None
    groups: list[GroupSpec] = field(default_factory=list)
    tunes: dict = field(default_factory=dict)  # experiment name (None: the whole sweep) -> Tune
    sizes: list[dict] = field(default_factory=list)  # dotted overrides, one entry per size
    cli: dict = field(default_factory=dict)  # command-line overrides, applied last
    evaluation: EvalStage | None = None  # lm-eval on every completed final (clm) run (experiments/evaluation.py)
    compares: dict = field(default_factory=dict)  # experiment name (None: the whole sweep) -> Compare
    power: Power | None = None  # with seeds = "auto"
    auto_finals: list[int] = field(default_factory=list)  # with seeds = "auto": every final seed it may run
    # {experiment: {"key", "levels", "experiments": {level: cell experiment}, "groups": {cell group: base group}}}
    factors: dict = field(default_factory=dict)

    def tune_of(self, group: GroupSpec) -> Tune | None:
        return self.tunes.get(group.experiment, self.tunes.get(None))

    def compare_of(self, experiment: str | None) -> Compare:
        return self.compares.get(experiment, self.compares.get(None)) or Compare()

    @property
    def auto(self) -> bool:
        return self.seeds == AUTO

    def tuning_values(self, group: GroupSpec, size: int | None) -> list:
        """The values `group` was tuned at: the grid, and the values beyond its edges that a best at an edge
        added (ascending for numbers)."""
        tune = self.tune_of(group)
        key = group_key(group.name, size)
        found = list(dict.fromkeys(r.value for r in self.runs if r.phase == "tune" and r.group == key))
        extra = [v for v in found if v not in tune.values]
        values = list(tune.values) + extra
        return sorted(values) if tune.numeric else values

    @property
    def tuning_runs(self) -> list[RunSpec]:
        return [r for r in self.runs if r.phase == "tune"]

    @property
    def n_runs(self) -> int:
        """Every run the sweep trains that is known now: untuned and tuning runs, and the tuned groups' final
        runs (the reused ones aside; with seeds = "auto", the first round's)."""
        first = self.power.min_seeds if self.auto else len(self.final_seeds())
        finals = sum(first for g in self.groups if self.tune_of(g)) * len(self.size_indices())
        return len(self.runs) + finals

    @property
    def tuned(self) -> bool:
        return bool(self.tunes)

    def size_indices(self) -> list[int | None]:
        return list(range(len(self.sizes))) if self.sizes else [None]

    def final_seeds(self) -> list[int | None]:
        """Every final seed the sweep may run (with seeds = "auto", up to the power table's max_seeds)."""
        if self.auto:
            return list(self.auto_finals)
        return list(self.seeds) if self.seeds else (list(range(FINAL_SEEDS)) if self.tuned else [None])

    def final_runs(self, best: dict, counts: dict | None = None) -> list[RunSpec]:
        """Every group's final runs: untuned groups as listed; a tuned group at best[(group, size)] on the final
        seeds (plus the tuning seeds when the tune reuses them), skipped while its best is not known. With
        seeds = "auto", an experiment runs its first counts.get(experiment, min_seeds) seeds."""
        out = []
        for g in self.groups:
            tune = self.tune_of(g)
            for size in self.size_indices():
                if tune is None:
                    out += [r for r in self.runs if r.phase == "final" and r.group == group_key(g.name, size)]
                    continue
                if (g.name, size) not in best:
                    continue
                seeds = list(self.final_seeds())
                if self.auto:
                    seeds = seeds[: (counts or {}).get(g.experiment, self.power.min_seeds)]
                if tune.reuse:
                    seeds += [s for s in tune.seeds if s not in seeds]
                out += [self.make_run(g, size, best[(g.name, size)], seed, "final") for seed in seeds]
        return out

    def make_run(self, g: GroupSpec, size: int | None, value, seed: int | None, phase: str) -> RunSpec:
        tune = self.tune_of(g)
        parts = [g.name] + ([f"z{size}"] if size is not None else [])
        if tune is not None:
            parts.append(f"{SHORT.get(tune.key, tune.option)}{value_text(value)}")
        name = slug("_".join(parts) + ("" if seed is None else f"_s{seed}"))
        size_label = f", size {size}" if size is not None else ""
        group_label = g.label + size_label
        label = group_label + (f", {tune.option} {value_text(value)}" if tune is not None and phase == "tune" else "")
        label += "" if seed is None else f", seed {seed}"
        over = nest(self.sizes[size]) if size is not None else {}
        over = _merge(_merge(over, nest(g.recipe)), g.overrides)
        if tune is not None:
            over = _merge(over, {tune.section: {tune.option: value}})
        if seed is not None:
            over = _merge(over, {"train": {"seed": seed}})
        run = RunSpec(
            name,
            label,
            over,
            group=group_key(g.name, size),
            group_label=group_label,
            seed=seed,
            experiment=g.experiment,
            value=value,
            size=size,
            phase=phase,
        )
        try:
            run.config = load_config(None, _merge(_merge(self.base, over), self.cli))
        except UserError as e:
            raise UserError(f"run {run.label!r}: {e}") from None
        run.config.recipe = dict(g.recipe)  # the run's summary.json says which recipe values it trained with
        return run

    def to_json(self, finals: list[RunSpec] | None = None) -> dict:
        """sweep.json: `runs` the runs the report shows (the final ones), `tuning` the tuning runs."""
        finals = finals if finals is not None else [r for r in self.runs if r.phase == "final"]
        return {
            "name": self.name,
            "description": self.description,
            "expected_cost": self.expected_cost,
            "target_run": self.target_run,
            "seeds": self.seeds,
            "reference": self.reference,
            "finetune": self.finetune.to_json() if self.finetune else None,
            "eval": self.evaluation.to_json() if self.evaluation else None,
            "base": self.base,
            "probes": self.probes,
            "experiments": self.experiments,
            "tune": {str(k): t.to_json() for k, t in self.tunes.items()} or None,
            "sizes": self.sizes or None,
            "factors": self.factors or None,
            "runs": [r.to_json() for r in finals],
            "tuning": [r.to_json() for r in self.tuning_runs],
        }


def group_key(name: str, size: int | None) -> str:
    """The name of a group's runs at one of the sweep's sizes (the group's own name without sizes)."""
    return name if size is None else f"{name}_z{size}"


def _merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for section, values in b.items():
        out.setdefault(section, {}).update(values)
    return out


def _apply_recipes(groups: list[GroupSpec], base: dict, cli: dict) -> None:
    """Each group's block recipe, in effect where neither the group nor the command line sets the key
    (docs/sweeps.md#where-a-runs-settings-come-from: package defaults < sweep base < block recipe < the group's own
    settings < command line)."""
    for g in groups:
        block = (
            g.overrides.get("model", {}).get("block")
            or cli.get("model", {}).get("block")
            or base.get("model", {}).get("block")
            or "pre-ln"
        )
        try:
            recipe = block_recipe(block)
        except ValueError:
            recipe = {}  # an unknown block: load_config names it with the valid choices
        own = {f"{s}.{k}" for part in (g.overrides, cli) for s, values in part.items() for k in values}
        g.recipe = {k: v for k, v in recipe.items() if k not in own}


def build_sweep(spec: dict, extra: dict | None = None, seeds: list[int] | None = None) -> Sweep:
    """A sweep from its dict form (a preset, or a parsed SWEEP.toml); `extra` (the command line's overrides)
    applies to every run, over every other setting; `seeds` replaces the sweep's seeds (`compare --seeds`)."""
    unknown = sorted(set(spec) - SWEEP_FIELDS)
    if unknown:
        raise UserError(f"unknown sweep field {unknown[0]!r}; valid: {', '.join(sorted(SWEEP_FIELDS))}")
    spec, factors = expand_factors(with_common(spec))
    if seeds is not None:
        spec = dict(spec, seeds=seeds)
    cli = extra or {}
    groups = groups_of(spec)
    seeds = spec.get("seeds")
    power = None
    if seeds == AUTO:
        power = parse_power(spec.get("power"))
        if not spec.get("tune") and not any(
            isinstance(m, dict) and m.get("tune") for m in (spec.get("experiments") or {}).values()
        ):
            raise UserError(
                'seeds = "auto" needs a tuned sweep ([tune]): the count is chosen for each group\'s final seeds'
            )
    elif spec.get("power") is not None:
        raise UserError('[power] is used with seeds = "auto" only; give seeds = "auto" or drop [power]')
    if seeds is not None and seeds != AUTO:
        check_seeds(seeds)
    if seeds is not None:
        for g in groups:
            if "seed" in g.overrides.get("train", {}):
                raise UserError(f"run {g.label!r} sets train.seed; with `seeds` the sweep sets it")
    if "seed" in cli.get("train", {}) and (seeds is not None or spec.get("tune")):
        raise UserError("--train.seed does not go with a sweep's seeds; use --seeds")
    finals_for_tuning = auto_seeds(spec, power.max_seeds) if power else (seeds or list(range(FINAL_SEEDS)))
    tuned = tunes(spec, finals_for_tuning)
    for g in groups:
        tune = tuned.get(g.experiment, tuned.get(None))
        if tune is not None and tune.option in g.overrides.get(tune.section, {}):
            raise UserError(f"run {g.label!r} sets {tune.key}, the setting its experiment tunes; drop it")
    for key in {t.key for t in tuned.values()}:
        section, _, option = key.partition(".")
        if option in cli.get(section, {}):
            raise UserError(f"--{key} is the tuned setting; change the sweep's tune values instead")
    _apply_recipes(groups, spec.get("base", {}), cli)
    sweep = Sweep(
        spec.get("name", "sweep"),
        spec.get("description", ""),
        spec.get("base", {}),
        [],
        spec.get("probes"),
        spec.get("expected_cost", ""),
        spec.get("target_run"),
        seeds,
        parse_stage(spec.get("finetune")),
        spec.get("reference"),
        None,
        groups,
        tuned,
        parse_sizes(spec.get("sizes")),
        cli,
        parse_eval(spec.get("eval")),
        compares(spec),
        power,
        finals_for_tuning if power else [],
        factors,
    )
    target_run = spec.get("target_run")
    names = [g.name for g in groups]
    if target_run is not None and target_run not in names:
        raise UserError(f"target_run {target_run!r} is not a run of the sweep; runs: {', '.join(names)}")
    sweep.experiments = check_experiments(spec, groups)
    for g in groups:  # every run is validated before any trains
        tune = sweep.tune_of(g)
        for size in sweep.size_indices():
            if tune is None:
                sweep.runs += [sweep.make_run(g, size, None, s, "final") for s in sweep.final_seeds()]
            else:
                sweep.runs += [sweep.make_run(g, size, v, s, "tune") for v in tune.values for s in tune.seeds]
    names = [r.name for r in sweep.runs]
    if len(set(names)) != len(names):
        raise UserError(f"two runs share the name {next(n for n in names if names.count(n) > 1)!r}; name them")
    if sweep.finetune is not None and any(r.config.model.task != "mlm" for r in sweep.runs):
        bad = next(r for r in sweep.runs if r.config.model.task != "mlm")
        raise UserError(
            f"run {bad.label!r} is a {bad.config.model.task} run; a sweep with [finetune] pre-trains "
            'mlm runs (model.task = "mlm")'
        )
    if sweep.evaluation is not None and any(r.config.model.task != "clm" for r in sweep.runs):
        bad = next(r for r in sweep.runs if r.config.model.task != "clm")
        raise UserError(
            f"run {bad.label!r} is a {bad.config.model.task} run; a sweep's [eval] scores causal language models "
            '(model.task = "clm")'
        )
    return sweep


def load_sweep(
    preset_or_path: str, extra: dict | None = None, seeds: list[int] | None = None, only: list[str] | None = None
) -> Sweep:
    """A preset or a SWEEP.toml, built; `only`: the experiments to keep (the others' runs are left out)."""
    from blocklab.experiments.presets import PRESETS, merge

    if preset_or_path in PRESETS:
        spec = PRESETS[preset_or_path]
    elif not Path(preset_or_path).is_file():
        raise UserError(f"{preset_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a sweep file")
    else:
        spec = read_toml(preset_or_path, "sweep file")
        if "extends" in spec:  # a file laid over a preset, as the GPU presets are (docs/sweeps.md)
            parent = spec.pop("extends")
            if parent not in PRESETS:
                raise UserError(f"{preset_or_path}: extends = {parent!r} is no preset; presets: {', '.join(PRESETS)}")
            replace = tuple(spec.pop("replace", ()))
            spec = merge(PRESETS[parent], spec, replace)
    return build_sweep(only_experiments(spec, only) if only else spec, extra, seeds)


def run_status(run_dir: Path) -> str | None:
    """completed | diverged | stalled | interrupted from summary.json; 'partial' for a killed run (or an unreadable
    summary); None if not started."""
    summary = read_summary(run_dir)
    if summary is not None:
        return summary.status
    return "partial" if summary_path(run_dir).is_file() or (run_dir / "config.toml").is_file() else None
