"""Sweeps: a base run config, a grid and/or a list of runs; each run is an ordinary, resumable training run."""
from __future__ import annotations

import copy
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.errors import UserError
from blocklab.experiments.downstream import FinetuneStage, parse_stage
from blocklab.training.config import RunConfig, load_config, read_toml

# An experiment's name: it names the report's section ids and figure files (loss_vs_step_NAME.png).
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
EXPERIMENT_KEYS = ("title", "description", "target_run")
SHORT = {"model.block": "", "train.lr": "lr", "train.warmup_steps": "wu", "train.seed": "s", "model.n_layers": "L",
         "model.d_model": "d", "train.optimizer": "", "model.norm": "", "model.init": ""}


@dataclass
class RunSpec:
    name: str
    label: str
    overrides: dict  # {"model": {...}, "train": {...}} on top of the sweep's base
    config: RunConfig | None = None
    group: str = ""        # runs that differ only in their seed share a group (the report averages them)
    group_label: str = ""
    seed: int | None = None
    experiment: str | None = None  # a key of Sweep.experiments: the report's part this run belongs to

    def __post_init__(self):
        self.group = self.group or self.name
        self.group_label = self.group_label or self.label


@dataclass
class Sweep:
    name: str
    description: str = ""
    base: dict = field(default_factory=dict)
    runs: list[RunSpec] = field(default_factory=list)
    probes: dict | None = None  # arguments of `blocklab probe` (key -> value), run once per sweep
    expected_cost: str = ""
    target_run: str | None = None  # the report's steps-to-target uses this run's final loss (a group name)
    seeds: list[int] | None = None  # every run repeated once per seed (train.seed), averaged in the report
    finetune: FinetuneStage | None = None  # fine-tune every (mlm) run afterwards (experiments/downstream.py)
    reference: dict | None = None  # the paper's numbers the report sets beside ours (reporting/downstream.py)
    # {name: {"title", "description", "target_run"}}: the experiments the sweep holds, each reported on its own
    # (its runs, table, figures and target); None: one experiment, reported as a whole (experiments.py)
    experiments: dict | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "expected_cost": self.expected_cost,
                "target_run": self.target_run, "seeds": self.seeds, "reference": self.reference,
                "finetune": self.finetune.to_json() if self.finetune else None,
                "base": self.base, "probes": self.probes, "experiments": self.experiments,
                "runs": [{"name": r.name, "label": r.label, "overrides": r.overrides, "group": r.group,
                          "group_label": r.group_label, "seed": r.seed, "experiment": r.experiment}
                         for r in self.runs]}


def _nest(flat: dict) -> dict:
    """{'model.block': 'sas'} -> {'model': {'block': 'sas'}}."""
    out: dict = {}
    for key, value in flat.items():
        section, _, name = key.partition(".")
        if not name:
            raise UserError(f"sweep key {key!r} must look like section.option (e.g. model.block)")
        out.setdefault(section, {})[name] = value
    return out


def _merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for section, values in b.items():
        out.setdefault(section, {}).update(values)
    return out


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def build_sweep(spec: dict, extra: dict | None = None) -> Sweep:
    """A sweep from its dict form (a preset, or a parsed SWEEP.toml); `extra` overrides every run."""
    known = {"name", "description", "base", "grid", "runs", "probes", "expected_cost", "target_run", "seeds",
             "finetune", "reference", "experiments", "grid_experiment"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise UserError(f"unknown sweep field {unknown[0]!r}; valid: {', '.join(sorted(known))}")
    base = _merge(spec.get("base", {}), extra or {})
    grid = spec.get("grid", {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"grid.{key} must be a non-empty list")
    keys = list(grid)
    runs = []
    for combo in itertools.product(*(grid[k] for k in keys)) if keys else []:
        flat = dict(zip(keys, combo))
        parts = [f"{SHORT.get(k, k.split('.')[-1])}{_fmt(v)}" for k, v in flat.items() if len(grid[k]) > 1]
        label = ", ".join(parts) or spec.get("name", "run")
        runs.append(RunSpec(_slug("_".join(parts)) or "run", label, _nest(flat),
                            experiment=spec.get("grid_experiment")))
    for i, extra_run in enumerate(spec.get("runs", [])):
        extra_run = dict(extra_run)
        label = extra_run.pop("label", None) or f"run {i}"
        experiment = extra_run.pop("experiment", None)
        runs.append(RunSpec(_slug(extra_run.pop("name", None) or label), label, _nest(extra_run),
                            experiment=experiment))
    if not runs:
        raise UserError("the sweep defines no runs: give a [grid] and/or [[runs]]")
    seeds = spec.get("seeds")
    if seeds is not None:
        runs = _with_seeds(runs, seeds)
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"two runs share the name {next(n for n in names if names.count(n) > 1)!r}; name them")
    for r in runs:  # validate every run before training any
        try:
            r.config = load_config(None, _merge(base, r.overrides))
        except UserError as e:
            raise UserError(f"run {r.label!r}: {e}") from None
    stage = parse_stage(spec.get("finetune"))
    if stage is not None and any(r.config.model.task != "mlm" for r in runs):
        bad = next(r for r in runs if r.config.model.task != "mlm")
        raise UserError(f"run {bad.label!r} is a {bad.config.model.task} run; a sweep with [finetune] pre-trains "
                        "mlm runs (model.task = \"mlm\")")
    target_run = spec.get("target_run")
    groups = list(dict.fromkeys(r.group for r in runs))
    if target_run is not None and target_run not in groups:
        raise UserError(f"target_run {target_run!r} is not a run of the sweep; runs: {', '.join(groups)}")
    experiments = check_experiments(spec, runs)
    return Sweep(spec.get("name", "sweep"), spec.get("description", ""), base, runs, spec.get("probes"),
                 spec.get("expected_cost", ""), target_run, seeds, stage,
                 spec.get("reference"), experiments)


def check_experiments(spec: dict, runs: list[RunSpec]) -> dict | None:
    """The sweep's `experiments` table, checked against its runs, as {name: {title, description, target_run}}
    (None without one). A sweep with experiments tags every run: `[[runs]]` with `experiment = NAME`, grid runs
    with the sweep's `grid_experiment = NAME`; each experiment's `target_run` is one of its own runs."""
    table, grid_exp = spec.get("experiments"), spec.get("grid_experiment")
    if table is None:
        tagged = next((r for r in runs if r.experiment is not None), None)
        if tagged is not None:
            raise UserError(f"run {tagged.label!r} names experiment {tagged.experiment!r}, but the sweep has no "
                            "[experiments] table; add one or drop the run's experiment")
        return None
    if not isinstance(table, dict) or not table:
        raise UserError("experiments must be a non-empty table of experiments, e.g. "
                        "[experiments.he] title = \"He & Hofmann\" target_run = \"pre-ln\"")
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
        for key in EXPERIMENT_KEYS:
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise UserError(f"experiments.{name}.{key} = {meta[key]!r} must be a string")
        out[name] = {"title": meta.get("title") or name, "description": meta.get("description") or "",
                     "target_run": meta.get("target_run")}
    for r in runs:
        if r.experiment is None:
            raise UserError(f"run {r.label!r} names no experiment; give it experiment = NAME, one of "
                            f"{', '.join(out)} (grid runs: the sweep's grid_experiment = NAME)")
        if r.experiment not in out:
            raise UserError(f"run {r.label!r}: experiment {r.experiment!r} is not one of the sweep's experiments: "
                            f"{', '.join(out)}")
    for name, meta in out.items():
        groups = list(dict.fromkeys(r.group for r in runs if r.experiment == name))
        if not groups:
            raise UserError(f"experiment {name!r} has no runs; tag its runs with experiment = {name!r}")
        if meta["target_run"] is not None and meta["target_run"] not in groups:
            raise UserError(f"experiments.{name}.target_run {meta['target_run']!r} is not a run of that "
                            f"experiment; its runs: {', '.join(groups)}")
    return out


def _with_seeds(runs: list[RunSpec], seeds) -> list[RunSpec]:
    """Each run once per seed, seeds innermost: NAME_s0, NAME_s1, ... in the group NAME."""
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        raise UserError(f"seeds = {seeds!r} is not valid; give a list of distinct integers >= 0, e.g. [0, 1]")
    out = []
    for r in runs:
        if "seed" in r.overrides.get("train", {}):
            raise UserError(f"run {r.label!r} sets train.seed; with `seeds` the sweep sets it")
        for seed in seeds:
            over = _merge(r.overrides, {"train": {"seed": seed}})
            out.append(RunSpec(f"{r.name}_s{seed}", f"{r.label}, seed {seed}", over, group=r.name,
                               group_label=r.label, seed=seed, experiment=r.experiment))
    return out


def load_sweep(preset_or_path: str, extra: dict | None = None) -> Sweep:
    from blocklab.experiments.presets import PRESETS

    if preset_or_path in PRESETS:
        return build_sweep(PRESETS[preset_or_path], extra)
    if not Path(preset_or_path).is_file():
        raise UserError(f"{preset_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a sweep file")
    return build_sweep(read_toml(preset_or_path, "sweep file"), extra)


def run_status(run_dir: Path) -> str | None:
    """completed | diverged | interrupted from summary.json; 'partial' for a killed run; None if not started."""
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            return json.loads(summary.read_text()).get("status")
        except ValueError:
            return "partial"
    return "partial" if (run_dir / "config.toml").is_file() else None
