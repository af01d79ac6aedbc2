"""Run configuration: TrainConfig, the [model]/[data]/[train] sections, TOML files and dotted overrides."""

from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

from blocklab.block_table import describe_blocks
from blocklab.config import ModelConfig
from blocklab.data import DataConfig
from blocklab.errors import ConfigError, UserError
from blocklab.overrides import parse_overrides as parse_tokens
from blocklab.settings import help_text, markdown_table, only_where, setting, validate
from blocklab.training.recipe import apply_recipe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OPTIMIZERS = ("adamw", "adam", "sgd", "muon")
SCHEDULES = ("constant", "linear", "cosine", "inv_sqrt")
PRECISIONS = ("fp32", "bf16", "fp16")
PARALLELS = ("ddp", "fsdp")
GRAD_SYNCS = ("every", "last")  # train.fsdp_grad_sync
DEVICES = ("auto", "cpu", "cuda")
TRACKERS = ("tensorboard", "mlflow", "wandb")  # training/trackers.py; mlflow and wandb are optional extras
ADAM = only_where("optimizer", "adamw", "adam", "muon")  # the settings of Adam's, muon's AdamW part's too


@dataclass
class TrainConfig:
    steps: int = setting(1000, help="optimizer updates in the run", unit="steps", min=1)
    batch_size: int = setting(
        16, help="sequences per update, over all processes (split across ranks under torchrun)", min=1
    )
    lr: float = setting(1e-3, help="peak learning rate", min=0, min_exclusive=True)
    optimizer: str = setting(
        "adamw",
        help="the optimizer (sgd with train.momentum); muon: torch.optim.Muon on the blocks' hidden matrices, its "
        "update RMS-matched to AdamW's so that train.lr serves both, and AdamW on the embeddings, head, gains, "
        "norms, biases and scalars",
        choices=OPTIMIZERS,
    )
    schedule: str = setting(
        "linear",
        help="after the linear warm-up: constant, linear or cosine decay to zero, or inv_sqrt (fairseq's inverse_sqrt)",
        choices=SCHEDULES,
    )
    warmup_steps: int | None = setting(
        None, help="linear warm-up from 0 to train.lr (0: none)", unit="steps", derived="5% of train.steps", min=0
    )
    weight_decay: float = setting(
        0.1,
        help="decoupled weight decay on every matrix (muon: on Muon's matrices as on AdamW's embeddings and "
        "head); gains, norms, biases and scalars get none",
        min=0,
    )
    beta1: float = setting(
        0.9, help="Adam's first-moment decay (muon: its AdamW part's)", min=0, max=1, max_exclusive=True, applies=ADAM
    )
    beta2: float = setting(
        0.98, help="Adam's second-moment decay (muon: its AdamW part's)", min=0, max=1, max_exclusive=True, applies=ADAM
    )
    momentum: float = setting(0.9, help="optimizer=sgd only: momentum", min=0, applies=only_where("optimizer", "sgd"))
    # Kimi K2's QK-clip (training/qk_clip.py, attention/logits.py): the per-layer maxima go to metrics.jsonl.
    qk_clip: float | None = setting(
        None,
        help="QK-clip (Kimi K2) at this tau: after each step, a head whose largest attention logit on the batch "
        "exceeded tau has its W^Q and W^K scaled by sqrt(tau / max) each; logs max_logit/L{l}",
        derived="none: off",
        min=0,
        min_exclusive=True,
    )
    grad_clip: float = setting(1.0, help="clip the global gradient norm to this (0: no clipping)", min=0)
    seed: int = setting(0, help="seeds the initialisation, the batch order and the masks")
    log_every: int = setting(10, help="a metrics.jsonl line every this many steps", unit="steps", min=1)
    eval_every: int = setting(200, help="validation loss every this many steps", unit="steps", min=1)
    eval_batches: int = setting(8, help="validation batches per evaluation", min=1)
    checkpoint_every: int = setting(
        500, help="a checkpoint every this many steps (and at the end)", unit="steps", min=1
    )
    precision: str = setting("fp32", help="training precision (bf16/fp16: autocast)", choices=PRECISIONS)
    compile: bool | str = setting(
        "auto",
        help="torch.compile each block; auto: on for CUDA, off on the CPU",
        choices=("auto", True, False),
    )
    device: str = setting("auto", help="auto: CUDA when available, else the CPU", choices=DEVICES)
    divergence_factor: float = setting(
        1.5,
        help="the run is diverged when the loss exceeds this times the first loss (or is not finite)",
        min=1,
        min_exclusive=True,
    )
    # Stalled: after warm-up, the loss stays within stall_margin of the training split's unigram entropy for
    # stall_patience steps (training/stall.py): the model learned token frequencies only.
    stall_margin: float = setting(
        0.1,
        help="stalled: after warm-up, the loss stays within this of the unigram entropy",
        unit="nats",
        min=0,
        min_exclusive=True,
    )
    stall_patience: int = setting(
        100,
        help="stalled: the loss stays near the unigram entropy (train.stall_margin) this long (0: no stall detection)",
        unit="steps",
        min=0,
    )
    # One scale shared by runs with different warm-ups (none included) gives them one decay.
    inv_sqrt_scale: int | None = setting(
        None,
        help="schedule=inv_sqrt only: after warm-up the rate is lr * min(1, sqrt(s / t)) with this s",
        unit="steps",
        derived="train.warmup_steps, or 5% of train.steps without warm-up",
        min=0,
        applies=only_where("schedule", "inv_sqrt"),
    )
    label_smoothing: float = setting(
        0.0,
        help="model.task=translation only: label smoothing of the training loss (evaluation is the plain NLL)",
        min=0,
        max=1,
        max_exclusive=True,
    )
    keep_checkpoints: int = setting(2, help="the newest checkpoints kept (0: every one)", min=0)
    init_from: str | None = setting(
        None,
        help="model.task=classification: start the encoder (and tokenizer) from this mlm run, with a fresh head",
        derived="none: from scratch",
    )
    init_step: int | None = setting(
        None,
        help="with train.init_from: the checkpoint step to start from",
        derived="the run's latest",
        min=0,
        applies=lambda t: t["init_from"] is not None,
    )
    # Scale-out under torchrun (training/parallel.py): fsdp shards parameters, gradients and optimizer state
    # (FSDP2) and checkpoints through torch.distributed.checkpoint.
    parallel: str = setting(
        "ddp",
        help="under torchrun: ddp replicates the model, fsdp shards it over the processes",
        choices=PARALLELS,
    )
    grad_accum: int = setting(
        1, help="micro-batches per process and update (same losses, less memory); divides batch_size", min=1
    )
    activation_checkpointing: bool = setting(
        False, help="recompute each block's activations in the backward pass instead of keeping them"
    )
    # benchmarks/fsdp_memory.py (benchmarks/RESULTS.md, "CPU: FSDP's memory and gradient sync"): "every" saved
    # what it must, (1 - 1/N) x 4 bytes per parameter (28 MiB per process of 622 at 17M parameters, 134 of 1249
    # at 76M; 2 processes), and cost a reduce-scatter per micro-batch: 46% and 70% more time per step. Hence
    # "last", unless the whole gradients do not fit. DDP and one process ignore it: DDP reduces at the last.
    fsdp_grad_sync: str = setting(
        "last",
        help="parallel=fsdp with grad_accum > 1: reduce-scatter the gradients after every micro-batch (every: "
        "sharded, less memory) or only after the last (last: whole until then, as DDP; faster)",
        choices=GRAD_SYNCS,
        applies=only_where("parallel", "fsdp"),
    )
    threads: int = setting(
        0,
        help="CPU threads of the run's torch; 0: auto, one for a model of d_model <= 256, else one per core but "
        "one (OMP_NUM_THREADS when set): more collapse when other processes share the cores (benchmarks/RESULTS.md)",
        min=0,
    )
    # Where the numbers go besides metrics.jsonl (training/trackers.py); none of these changes what is trained.
    trackers: list[str] = setting(
        default_factory=lambda: ["tensorboard"],
        help="where metrics also go: tensorboard (tb/), mlflow, wandb (offline unless W&B is configured)",
        choices=TRACKERS,
        distinct=True,
    )
    tracker_group: str | None = setting(
        None,
        help="the MLflow experiment and W&B group the run is tracked in",
        derived="the run directory's name; a sweep's name for its runs",
        applies=lambda t: bool({"mlflow", "wandb"} & set(t["trackers"])),
    )
    mlflow_uri: str | None = setting(
        None,
        help="the MLflow tracking URI (train.trackers with mlflow)",
        derived="MLFLOW_TRACKING_URI, else an SQLite store: sqlite:///DIR/mlflow.db (a sweep's: in its --out)",
        applies=lambda t: "mlflow" in t["trackers"],
    )

    def __post_init__(self) -> None:
        if isinstance(self.compile, str) and self.compile.lower() in ("true", "false", "1", "0", "yes", "no"):
            self.compile = self.compile.lower() in ("true", "1", "yes")
        validate(self, "train")
        if self.batch_size % self.grad_accum:
            raise ConfigError(
                f"train.grad_accum={self.grad_accum} is not valid; it must divide train.batch_size="
                f"{self.batch_size} (each micro-batch is an equal share of the batch)"
            )
        if self.warmup_steps is None:
            self.warmup_steps = int(round(0.05 * self.steps))
        if self.warmup_steps > self.steps:
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} is not valid; it must be <= train.steps={self.steps}"
            )


def compiles(t: TrainConfig, device_type: str) -> bool:
    """Whether a run compiles its blocks on a device of this type (train.compile auto: on CUDA only)."""
    return t.compile is True or (t.compile == "auto" and device_type == "cuda")


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
        if train.qk_clip is not None:
            from blocklab.model.logits import qk_clip_refusal  # torch and the blocks: only when asked for

            why = qk_clip_refusal(model)
            if why is not None:
                raise ConfigError(
                    f"train.qk_clip={train.qk_clip!r} does not apply to model.block={model.block!r}: {why}"
                )
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
    if hint.startswith("list"):
        return _list(section, key, raw)
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


def _list(section: str, key: str, raw: str) -> list:
    """A list option as typed: a TOML (or JSON) array, '["tensorboard", "mlflow"]', or comma-separated words,
    'tensorboard,mlflow' ('' is the empty list). The items are checked by the field's declaration."""
    text = raw.strip()
    if not text.startswith("["):
        return [part.strip() for part in text.split(",") if part.strip()]
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        raise UserError(
            f'--{section}.{key} {raw!r}: expected a list, as in \'["a", "b"]\' or a,b (comma-separated)'
        ) from None


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
    settings that neither sets (training/recipe.py), and RunConfig.recipe records what it filled in.

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
            elif isinstance(value, list):
                text = "[" + ", ".join(_toml_string(v) for v in value) + "]"
            elif isinstance(value, (int, float)):
                text = repr(value)
            else:
                text = _toml_string(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


def _toml_string(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def describe_options() -> str:
    """Every option with its type, true default, choices and description (from the settings' declarations),
    then each block's equation (the torch-free block table, tested equal to the block classes)."""
    return help_text(SECTIONS) + "\n\n" + describe_blocks()


def options_markdown() -> str:
    """The README's table of the [model], [data] and [train] options (a test keeps the two equal)."""
    return markdown_table(SECTIONS)
