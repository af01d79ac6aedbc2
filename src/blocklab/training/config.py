"""Run configuration: TrainConfig, the [model]/[data]/[train] sections, TOML files and dotted overrides."""

from __future__ import annotations

import dataclasses
import math
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

from blocklab.config import ModelConfig, model_choices
from blocklab.data import DataConfig
from blocklab.errors import UserError
from blocklab.overrides import parse_overrides as parse_tokens
from blocklab.registry import REGISTRY
from blocklab.validate import choice, positive

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("constant", "linear", "cosine", "inv_sqrt")
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLELS = ("ddp", "fsdp")


@dataclass
class TrainConfig:
    steps: int = 1000
    batch_size: int = 16  # global batch (split across ranks under torchrun)
    lr: float = 1e-3
    optimizer: str = "adamw"
    schedule: str = "linear"  # linear warm-up then linear decay to zero (He & Hofmann)
    warmup_steps: int | None = None  # None: 5% of steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.98
    momentum: float = 0.9  # sgd only
    grad_clip: float = 1.0  # 0 disables clipping
    seed: int = 0
    log_every: int = 10
    eval_every: int = 200
    eval_batches: int = 8
    checkpoint_every: int = 500
    precision: str = "fp32"
    compile: bool | str = "auto"  # auto: on for CUDA (each block compiled once), off on the CPU
    device: str = "auto"  # auto | cpu | cuda
    divergence_factor: float = 1.5  # diverged when loss > factor * first loss (or non-finite)
    # Stalled: after warm-up, the loss stays within stall_margin nats of the training split's unigram
    # entropy for stall_patience steps (training/stall.py); stall_patience 0 turns detection off.
    stall_margin: float = 0.1
    stall_patience: int = 100
    # inv_sqrt only: the rate is lr * min(1, sqrt(inv_sqrt_scale / t)) after warm-up, so runs with
    # different warm-ups (none included) share one decay; None: warmup_steps, or 5% of steps without warm-up.
    inv_sqrt_scale: int | None = None
    label_smoothing: float = 0.0  # task="translation" only (training loss; evaluation is the plain NLL)
    keep_checkpoints: int = 2  # the newest checkpoints kept; 0 keeps every one (fine-tuning along pre-training)
    # task="classification": start the encoder from this mlm run's checkpoint (init_step; None: its
    # latest), with a fresh head; its tokenizer too (training/finetune.py). None: from scratch.
    init_from: str | None = None
    init_step: int | None = None
    # Scale-out (SPEC section 6; training/parallel.py). Under torchrun: ddp replicates the model, fsdp
    # shards parameters, gradients and optimizer state over the processes (FSDP2) and checkpoints through
    # torch.distributed.checkpoint. grad_accum splits each process's share of the batch into that many
    # micro-batches (same losses, less memory); activation_checkpointing recomputes each block's
    # activations in the backward pass instead of keeping them.
    parallel: str = "ddp"
    grad_accum: int = 1
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        for name in (
            "steps",
            "batch_size",
            "log_every",
            "eval_every",
            "eval_batches",
            "checkpoint_every",
            "grad_accum",
        ):
            positive(f"train.{name}", getattr(self, name))
        positive("train.lr", _num(self.lr), float)
        choice("train.optimizer", self.optimizer, OPTIMIZERS)
        choice("train.schedule", self.schedule, SCHEDULES)
        choice("train.precision", self.precision, PRECISIONS)
        choice("train.device", self.device, ("auto", "cpu", "cuda"))
        choice("train.parallel", self.parallel, PARALLELS)
        if not isinstance(self.activation_checkpointing, bool):
            raise ValueError(
                f"train.activation_checkpointing={self.activation_checkpointing!r} is not valid; "
                "it must be true or false"
            )
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"train.grad_accum={self.grad_accum} is not valid; it must divide train.batch_size="
                f"{self.batch_size} (each micro-batch is an equal share of the batch)"
            )
        if isinstance(self.compile, str) and self.compile.lower() in ("true", "false", "1", "0", "yes", "no"):
            self.compile = self.compile.lower() in ("true", "1", "yes")
        if not (isinstance(self.compile, bool) or self.compile == "auto"):
            raise ValueError(f"train.compile={self.compile!r} is not valid; choose one of: auto, true, false")
        if self.warmup_steps is None:
            self.warmup_steps = int(round(0.05 * self.steps))
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"train.warmup_steps={self.warmup_steps!r} is not valid; it must be an integer >= 0")
        if self.warmup_steps > self.steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} is not valid; it must be <= train.steps={self.steps}"
            )
        for name in ("weight_decay", "grad_clip", "momentum"):
            if _num(getattr(self, name)) < 0:
                raise ValueError(f"train.{name}={getattr(self, name)!r} is not valid; it must be >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= _num(getattr(self, name)) < 1:
                raise ValueError(f"train.{name}={getattr(self, name)!r} is not valid; it must be in [0, 1)")
        if _num(self.divergence_factor) <= 1:
            raise ValueError(f"train.divergence_factor={self.divergence_factor!r} is not valid; it must be > 1")
        if not _num(self.stall_margin) > 0:
            raise ValueError(f"train.stall_margin={self.stall_margin!r} is not valid; it must be > 0")
        if not 0 <= _num(self.label_smoothing) < 1:
            raise ValueError(f"train.label_smoothing={self.label_smoothing!r} is not valid; it must be in [0, 1)")
        for name, value in (
            ("stall_patience", self.stall_patience),
            ("inv_sqrt_scale", self.inv_sqrt_scale),
            ("keep_checkpoints", self.keep_checkpoints),
            ("init_step", self.init_step),
        ):
            if (value is not None or name == "stall_patience") and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"train.{name}={value!r} is not valid; it must be an integer >= 0")


def compiles(t: TrainConfig, device_type: str) -> bool:
    """Whether a run compiles its blocks on a device of this type (train.compile auto: on CUDA only)."""
    return t.compile is True or (t.compile == "auto" and device_type == "cuda")


def _num(x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return float("nan")
    return float(x)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}  # in blocklab.overrides.SECTIONS' order


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # The block recipe's values that filled settings this run left unset ({"train.weight_decay": 0.0}), for
    # the log and summary.json. Not a TOML section: the values themselves are in model/data/train.
    recipe: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    @classmethod
    def from_dict(cls, raw: dict) -> RunConfig:
        """Build and validate; model.vocab_size / max_seq_len follow data.vocab_size / seq_len unless set."""
        raw = {k: dict(v) for k, v in raw.items()}
        for section in raw:
            if section not in SECTIONS:
                raise UserError(f"unknown config section [{section}]; valid: {', '.join(SECTIONS)}")
        for section, cls_ in SECTIONS.items():
            known = {f.name for f in fields(cls_)}
            for key in raw.get(section, {}):
                if key not in known:
                    raise UserError(
                        f"unknown option {section}.{key}; valid {section} options: {', '.join(sorted(known))}"
                    )
        m, d = raw.setdefault("model", {}), raw.setdefault("data", {})
        try:
            data = DataConfig(**d)
            m.setdefault("vocab_size", data.vocab_size)
            m.setdefault("max_seq_len", data.seq_len)
            model = ModelConfig(**m)
            train = TrainConfig(**raw.get("train", {}))
        except (ValueError, TypeError) as e:
            raise UserError(str(e)) from None
        if data.seq_len > model.max_seq_len:
            raise UserError(f"data.seq_len={data.seq_len} exceeds model.max_seq_len={model.max_seq_len}")
        if train.label_smoothing and model.task != "translation":
            raise UserError(f"train.label_smoothing={train.label_smoothing!r} applies to model.task='translation' only")
        if train.init_from is not None and model.task != "classification":
            raise UserError("train.init_from applies to model.task='classification' only (blocklab finetune)")
        if data.vocab_size > model.vocab_size:
            raise UserError(f"data.vocab_size={data.vocab_size} exceeds model.vocab_size={model.vocab_size}")
        return cls(model, data, train)


def coerce(section: str, key: str, raw: str):
    """Turn a command-line string into the type of the dataclass field section.key."""
    cls_ = SECTIONS[section]
    hints = typing.get_type_hints(cls_)
    if key not in hints:
        known = ", ".join(sorted(hints))
        raise UserError(f"unknown option --{section}.{key}; valid {section} options: {known}")
    hint = str(hints[key])
    if raw.lower() in ("none", "null") and "None" in hint:
        return None
    try:
        words = ("true", "false", "1", "0", "yes", "no")
        if hints[key] is bool or ("bool" in hint and raw.lower() in words):  # bool | str: compile = auto
            if raw.lower() not in words:
                raise ValueError
            return raw.lower() in ("true", "1", "yes")
        if "float" in hint:
            return float(raw)
        if "int" in hint:
            return int(raw)
    except ValueError:
        raise UserError(f"--{section}.{key} {raw!r}: expected {hint.replace('typing.', '')}") from None
    return raw


def parse_overrides(tokens: list[str]) -> dict:
    """['--model.block', 'sas-p', '--train.lr=1e-3'] -> {'model': {'block': 'sas-p'}, 'train': {'lr': 0.001}}."""
    return parse_tokens(tokens, coerce)


def read_toml(path: str | Path, what: str = "config file") -> dict:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} not found: {p}")
    try:
        return tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {p} is not valid TOML: {e}") from None


def apply_recipe(raw: dict) -> tuple[dict, dict]:
    """Fill in the recipe of raw's block (REGISTRY[block].recipe; model.block unset: the default block).

    `raw` is the nested {"model": {...}, "data": {...}, "train": {...}} of the settings a run sets itself;
    a recipe value goes only where raw has no value for its key, so every explicit setting wins (SPEC
    section 10: package defaults < block recipe < the run's own settings). Returns (a new raw, the values
    applied as {"section.option": value}); raw itself is left as it was. An unknown block applies nothing
    (RunConfig.from_dict then names the valid ones).
    """
    new = {section: dict(values) if isinstance(values, dict) else values for section, values in raw.items()}
    model = new.get("model")
    block = model.get("block", ModelConfig.block) if isinstance(model, dict) else ModelConfig.block
    spec = REGISTRY.get(block) if isinstance(block, str) else None
    applied: dict = {}
    for key, value in spec.recipe if spec is not None else ():
        section, option = key.split(".", 1)
        values = new.setdefault(section, {})
        if isinstance(values, dict) and option not in values:
            values[option] = applied[key] = value
    return new, applied


def describe_recipe(block: str, applied: dict) -> str:
    """One line for the training log: 'recipe of nGPT (Loshchilov et al. 2024, Sec. 2.6): train.weight_decay=0.0'."""
    spec = REGISTRY[block]
    values = ", ".join(f"{k}={v!r}" for k, v in applied.items())
    return f"recipe of {spec.label} ({spec.recipe_source}): {values}"


def config_differences(saved: RunConfig, asked: RunConfig, ignore=frozenset()) -> list[tuple[str, object, object]]:
    """[(dotted key, saved value, asked value)] for every setting in which two configs differ, except `ignore`
    ({(section, key)}): what resuming a run and reusing a sweep's stored run both check."""
    old = saved.to_dict()
    return [
        (f"{section}.{key}", old.get(section, {}).get(key), value)
        for section, values in asked.to_dict().items()
        for key, value in values.items()
        if old.get(section, {}).get(key) != value and (section, key) not in ignore
    ]


def load_config(path: str | Path | None, overrides: list[str] | dict | None = None, recipe: bool = False) -> RunConfig:
    """The file's settings, then the overrides over them; with `recipe`, the block's recipe fills in the
    settings that neither sets (apply_recipe), and RunConfig.recipe records what it filled in.

    Off by default: a stored run's config.toml is loaded as it is, and a sweep orders the recipe among its
    own layers itself."""
    raw: dict = {}
    if path is not None:
        p = Path(path)
        raw = read_toml(p)
        for section, value in raw.items():
            if not isinstance(value, dict):
                raise UserError(f"config file {p}: {section!r} must be a [section]")
    over = parse_overrides(overrides) if isinstance(overrides, list) else (overrides or {})
    for section, values in over.items():
        raw.setdefault(section, {}).update(values)
    applied: dict = {}
    if recipe:
        raw, applied = apply_recipe(raw)
    cfg = RunConfig.from_dict(raw)
    cfg.recipe = applied
    return cfg


def to_toml(cfg: RunConfig) -> str:
    """The resolved config as TOML (None values are left out: they mean 'the default')."""
    lines = []
    for section, values in cfg.to_dict().items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is None:
                continue
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (int, float)):
                text = repr(value)
            else:
                text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
            lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


def describe_options() -> str:
    """Every option with its default (and its choices where it has a list), for `blocklab train --help`."""
    choices = {("model", k): v for k, v in model_choices().items()}
    choices.update(
        {
            ("train", "optimizer"): OPTIMIZERS,
            ("train", "schedule"): SCHEDULES,
            ("train", "precision"): PRECISIONS,
            ("train", "parallel"): PARALLELS,
        }
    )
    out = []
    for section, cls_ in SECTIONS.items():
        default = cls_() if section != "model" else ModelConfig()
        out.append(f"  {section}.*")
        for f in fields(cls_):
            line = f"    --{section}.{f.name:<20} default: {getattr(default, f.name)!r}"
            if (section, f.name) in choices:
                line += f"; one of: {', '.join(choices[(section, f.name)])}"
            out.append(line)
    return "\n".join(out)


def describe_recipes() -> str:
    """Each block recipe, for `blocklab train --help`."""
    return "\n".join(
        f"  {b:<12} {', '.join(f'--{k} {v!r}' for k, v in spec.recipe)}  ({spec.recipe_source})"
        for b, spec in REGISTRY.items()
        if spec.public and spec.recipe
    )
