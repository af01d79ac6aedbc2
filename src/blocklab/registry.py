"""The block registry: name -> BlockSpec, every fact about a block.

It sits below the config and the blocks: the blocks (blocks/) register into it, and ModelConfig
validates a block name against it, so neither imports the other's layer upwards.

Adding a block is one class, one `register(...)` on it, its line in block_table.py and its tests: the
models (model/), the probes' predictions (probes/predictions.py) and the report's labels and colours
(reporting/) and the config's checks read the block's spec from `REGISTRY`; the check of a block's name and
the command line's --help read block_table.py's torch-free copy of the few facts they need (a test keeps the
two equal).
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass

from blocklab.block_table import BUILTIN_BLOCKS, public_blocks
from blocklab.overrides import SECTIONS
from blocklab.validate import choice

# The tasks a model can be built for; each block's spec names those it offers.
TASKS = ("clm", "mlm", "translation", "classification")

# The families are the sections of docs/blocks.md: classic: Post-LN, Pre-LN and the parallel block; simplified:
# He & Hofmann's blocks; successor: the published blocks that rearrange Post-LN and Pre-LN; stream: the blocks that
# change the residual stream; ablation: a probe's contrast, not a block to train.
FAMILIES = ("classic", "simplified", "successor", "stream", "ablation")

# The options a block may take: two replacements of every norm layer (norm="dyt", norm="derf") and two changes
# to the softmax attention (qk_norm=True, attn_gate), which apply to every block built from norm layers and
# softmax attention (DEFAULT_OPTIONS), and Canon layers (canon="ABCD"), which the Pre-LN-shaped blocks name. A
# block's `options` names those it takes; the config refuses the others.
OPTIONS = ("dyt", "qk_norm", "derf", "attn_gate", "canon")
DEFAULT_OPTIONS = ("dyt", "qk_norm", "derf", "attn_gate")

# The laws of E|x_l|^2 at initialisation that probes/predictions.py knows, by the block shape they follow.
HIDDEN_NORM_LAWS = {
    "residual": "x + sub-layers on normed inputs: each block adds the MLP's variance and at most the "
    "attention's (Xiong et al. Lemma 2)",
    "unit": "a unit-gain Norm ends every block: d",
    "identity-attention": "attention is the identity at init, then u + beta_FF MLP(Norm(u))",
    "no-skip": "beta_SA Norm(x) + beta_FF MLP(Norm(x)), attention the identity at init",
    "no-skip-no-norm": "no-skip on the first block; later blocks multiply the norm by beta_SA^2 + beta_FF^2 ffn",
    "value-projection": "attention = W^P W^V Norm(x) at init, then u + beta_FF MLP(Norm(u))",
    "softmax-no-skip": "u = A Norm(x), |u|^2 between 0 and d, then u + beta_FF MLP(Norm(u))",
    "identity": "every block is the identity at init: |x_0|^2 throughout",
    "peri": "the first block normalises its input to d, then each sub-layer adds a unit-gain Norm's output: +2d",
    "sphere": "every block ends on the unit sphere: 1",
}
# The laws that hold whatever the norm layers are (the others assume unit-gain LayerNorm / RMSNorm).
NORM_FREE_LAWS = ("identity", "sphere")

_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")
_SETTING = re.compile(rf"({'|'.join(SECTIONS)})\.[a-z_][a-z0-9_]*")
# Never part of a recipe: the learning rate is the tuned setting (every group at its own best rate:
# docs/verdicts.md#tuning-each-group-at-its-own-best-value), and the block is what the recipe belongs to.
NOT_RECIPE = {
    "train.lr": "the learning rate is tuned, never a recipe",
    "model.block": "a recipe belongs to its block and cannot change it",
}


def _flag(owner: str, field: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{owner} {field}={value!r} is not valid; choose one of: True, False")


@dataclass(frozen=True)
class Predictions:
    """What the papers predict for a block at initialisation; probes/predictions.py turns it into numbers.

    `hidden_norm`: a key of HIDDEN_NORM_LAWS (None: no paper covers the block) and `hidden_norm_source`
    the sentence that cites it; `lemma2_paper`: Xiong et al.'s Lemma 2 as published applies (Pre-LN);
    `last_ffn_slope`: Theorem 1's log-log slope of the last FFN's gradient norm against depth, with
    `last_ffn_source` (None: no paper predicts one); `bounded_update_source`: the paper that proves the
    first Adam step moves the output by O(1) whatever the depth (DeepNet), or None.
    """

    hidden_norm: str | None = None
    hidden_norm_source: str | None = None
    lemma2_paper: bool = False
    last_ffn_slope: float | None = None
    last_ffn_source: str | None = None
    bounded_update_source: str | None = None

    @property
    def identity_attention(self) -> bool:
        """Shaped attention: the attention sub-block is the identity map at init, so each token keeps
        its input geometry (no rank collapse; the cosine plot draws the input level)."""
        return self.hidden_norm in ("identity-attention", "no-skip", "no-skip-no-norm")

    def __post_init__(self) -> None:
        if self.hidden_norm is not None:
            choice("hidden_norm", self.hidden_norm, tuple(HIDDEN_NORM_LAWS))
        if (self.hidden_norm is None) != (not self.hidden_norm_source):
            raise ValueError(
                f"hidden_norm={self.hidden_norm!r} needs a hidden_norm_source, and only it: "
                f"got hidden_norm_source={self.hidden_norm_source!r}"
            )
        _flag("Predictions", "lemma2_paper", self.lemma2_paper)
        if self.lemma2_paper and self.hidden_norm != "residual":
            raise ValueError(f"lemma2_paper=True needs hidden_norm='residual', not {self.hidden_norm!r}")
        if self.bounded_update_source is not None and not (
            isinstance(self.bounded_update_source, str) and self.bounded_update_source.strip()
        ):
            raise ValueError(f"bounded_update_source={self.bounded_update_source!r} is not valid; give a sentence")
        slope = self.last_ffn_slope
        if slope is not None and (isinstance(slope, bool) or not isinstance(slope, (int, float))):
            raise ValueError(f"last_ffn_slope={slope!r} is not valid; it must be a number or None")
        if (slope is None) != (not self.last_ffn_source):
            raise ValueError(
                f"last_ffn_slope={slope!r} needs a last_ffn_source, and only it: "
                f"got last_ffn_source={self.last_ffn_source!r}"
            )


@dataclass(frozen=True)
class BlockSpec:
    """Every fact about a block, validated at construction (ValueError naming the field, the bad value
    and the valid choices).

    cls          the block: `cls(cfg, layer)`, `forward(x, key_mask=None)`
    label        display name in reports and figures ("Pre-LN"), unique
    family       one of FAMILIES
    colour       "#rrggbb", the block's colour in every figure, unique
    beta_ff      default beta_FF; None: the block has no beta_FF
    beta_sa      default beta_SA; None: the block has no beta_SA
    final_norm   a Norm after the last block
    has_norms    the block carries Norm layers (False: it does without, bar the stack's first and final norm)
    dropout      `ModelConfig.dropout` applies (a Dropout on each residual branch)
    decoder      the decoder block class for task="translation" (`decoder(cfg, layer)`), or None
    tasks        the tasks it is offered for; None: every task of config.TASKS, translation only with a
                 decoder. "translation" in tasks if and only if decoder is set.
    options      which of OPTIONS apply: "dyt" / "derf" (norm="dyt" / "derf" replaces its norm layers),
                 "qk_norm", "attn_gate" (a sigmoid gate on its softmax attention's output), "canon" (Canon
                 layers at the positions `canon` names); DEFAULT_OPTIONS unless the block says otherwise
    sphere       nGPT's unit-sphere model: every hidden state lies on the unit sphere (the probes' prediction of
                 the hidden-state norm, probes/predictions.py)
    model_hooks  what the block asks of the token model around it beyond its stack (an output-head parameter, a
                 re-normalisation after each optimizer step): a blocks.hooks.ModelHooks, None: nothing
    predictions  what the papers predict at init (Predictions)
    recipe       the block paper's training settings, as ("section.option", value) pairs ("train.weight_decay",
                 0.0): only what the paper states as part of its method and that differs from the package's
                 default; constants of the block itself live in its class. Applied to the settings a run leaves
                 unset (training/recipe.py apply_recipe; docs/sweeps.md#where-a-runs-settings-come-from)
    recipe_source  the paper section or table the recipe comes from ("Loshchilov et al. 2024, Sec. 2.6"),
                 required with a recipe and only with one
    """

    cls: type
    label: str
    family: str
    colour: str
    beta_ff: float | None = None
    beta_sa: float | None = None
    final_norm: bool = True
    has_norms: bool = True
    dropout: bool = False
    decoder: type | None = None
    tasks: tuple[str, ...] | None = None
    options: tuple[str, ...] = DEFAULT_OPTIONS
    sphere: bool = False
    model_hooks: object | None = None  # a blocks.hooks.ModelHooks: blocks sit above the registry
    predictions: Predictions = Predictions()
    recipe: tuple[tuple[str, object], ...] = ()
    recipe_source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cls, type):
            raise ValueError(f"BlockSpec cls={self.cls!r} is not valid; it must be a class")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"BlockSpec label={self.label!r} is not valid; it must be a non-empty string")
        choice("family", self.family, FAMILIES)
        if not isinstance(self.colour, str) or not _COLOUR.fullmatch(self.colour):
            raise ValueError(f"BlockSpec colour={self.colour!r} is not valid; it must be '#rrggbb'")
        for name in ("beta_ff", "beta_sa"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"BlockSpec {name}={v!r} is not valid; it must be a number or None")
        for name in ("final_norm", "has_norms", "dropout", "sphere"):
            _flag("BlockSpec", name, getattr(self, name))
        if self.decoder is not None and not isinstance(self.decoder, type):
            raise ValueError(f"BlockSpec decoder={self.decoder!r} is not valid; it must be a class or None")
        tasks = self.tasks
        if tasks is None:
            tasks = tuple(t for t in TASKS if t != "translation" or self.decoder is not None)
        elif isinstance(tasks, str) or not tasks:
            raise ValueError(f"BlockSpec tasks={tasks!r} is not valid; give a non-empty tuple of: {', '.join(TASKS)}")
        for t in tasks:
            choice("tasks", t, TASKS)
        if ("translation" in tasks) != (self.decoder is not None):
            raise ValueError(
                f"BlockSpec tasks={tuple(tasks)!r} with decoder={self.decoder!r}: 'translation' is "
                "offered if and only if the block has a decoder"
            )
        object.__setattr__(self, "tasks", tuple(tasks))
        if isinstance(self.options, str):
            raise ValueError(f"BlockSpec options={self.options!r} is not valid; give a tuple of: {', '.join(OPTIONS)}")
        for o in self.options:
            choice("options", o, OPTIONS)
        object.__setattr__(self, "options", tuple(self.options))
        if not isinstance(self.predictions, Predictions):
            raise ValueError(f"BlockSpec predictions={self.predictions!r} is not valid; it must be a Predictions")
        object.__setattr__(self, "recipe", _recipe(self.recipe))
        source = self.recipe_source
        if source is not None and not (isinstance(source, str) and source.strip()):
            raise ValueError(f"BlockSpec recipe_source={source!r} is not valid; name the paper's section or table")
        if bool(self.recipe) != (source is not None):
            raise ValueError(
                f"BlockSpec recipe={self.recipe!r} needs a recipe_source, and only it: got recipe_source={source!r}"
            )

    @property
    def public(self) -> bool:
        """A block users train (listed in BLOCKS and in docs/blocks.md), not an ablation for the probes."""
        return self.family != "ablation"


def _recipe(recipe) -> tuple[tuple[str, object], ...]:
    """Validate a recipe (pairs or a dict) and return it as a tuple of (dotted key, value) pairs."""
    pairs = tuple(recipe.items()) if isinstance(recipe, dict) else recipe
    if (
        isinstance(pairs, str)
        or not isinstance(pairs, (tuple, list))
        or any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in pairs)
    ):
        raise ValueError(f'BlockSpec recipe={recipe!r} is not valid; give ("section.option", value) pairs')
    seen = set()
    for key, value in pairs:
        if not isinstance(key, str) or not _SETTING.fullmatch(key):
            raise ValueError(
                f"BlockSpec recipe key {key!r} is not valid; write section.option with section one "
                f"of: {', '.join(SECTIONS)}"
            )
        if key in NOT_RECIPE:
            raise ValueError(f"BlockSpec recipe key {key!r} is not valid: {NOT_RECIPE[key]}")
        if key in seen:
            raise ValueError(f"BlockSpec recipe key {key!r} is given twice")
        seen.add(key)
        if not isinstance(value, (bool, int, float, str)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(
                f"BlockSpec recipe {key}={value!r} is not valid; a value is a finite number, a bool or a string"
            )
    return tuple((key, value) for key, value in pairs)


# The public blocks and their labels, in registry order, for what must answer without importing torch: the
# command line's --help and argument errors, and the sweep presets. From block_table.py, which a test keeps
# equal to the registry.
PUBLIC_BLOCKS: dict[str, str] = {name: facts.label for name, facts in public_blocks().items()}


class _Registry(dict):
    """name -> BlockSpec. The blocks register themselves when blocklab.blocks is imported, and that import
    brings torch; the package does not import it at start-up (the command line answers --help without
    torch), so the first read of the registry imports the blocks. By name: this module sits below them."""

    _loading = False  # True from the start of the blocks' import on, unless that import failed

    def _load(self) -> None:
        if not _Registry._loading:
            _Registry._loading = True
            try:
                importlib.import_module("blocklab.blocks")
            except BaseException:
                _Registry._loading = False
                raise

    def __getitem__(self, name):
        self._load()
        return super().__getitem__(name)

    def __contains__(self, name) -> bool:
        self._load()
        return super().__contains__(name)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def __repr__(self) -> str:
        self._load()
        return super().__repr__()

    def __eq__(self, other) -> bool:
        self._load()
        return super().__eq__(other)

    __hash__ = None

    def get(self, name, default=None):
        self._load()
        return super().get(name, default)

    def keys(self):
        self._load()
        return super().keys()

    def values(self):
        self._load()
        return super().values()

    def items(self):
        self._load()
        return super().items()

    def copy(self) -> dict:
        self._load()
        return dict(super().items())

    def pop(self, name, *default):
        self._load()
        return super().pop(name, *default)


REGISTRY: dict[str, BlockSpec] = _Registry()


def block_names() -> tuple[str, ...]:
    """Every valid block name, in registry order, without importing the blocks (torch) to answer: until they
    are imported nothing can be registered (register() imports them first), so the registry will hold exactly
    the built-in blocks of block_table.py. A config's validation refuses a bad block name at once this way."""
    return tuple(REGISTRY) if _Registry._loading else tuple(BUILTIN_BLOCKS)


def register(name: str, **facts):
    """Class decorator: REGISTRY[name] = BlockSpec(cls, **facts); name, label and colour must be new."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"block name {name!r} is not valid; use lower-case letters, digits and '-'")

    def wrap(cls):
        spec = BlockSpec(cls, **facts)
        if name in REGISTRY:
            raise ValueError(f"block {name!r} is already registered")
        for field in ("label", "colour"):
            taken = [b for b, s in REGISTRY.items() if getattr(s, field).lower() == getattr(spec, field).lower()]
            if taken:
                raise ValueError(f"{field}={getattr(spec, field)!r} of block {name!r} is already block {taken[0]!r}'s")
        REGISTRY[name] = spec
        cls.name = name
        return cls

    return wrap


def _known(name: str) -> BlockSpec:
    if name not in REGISTRY:
        raise ValueError(f"block={name!r} is not registered; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def unregister(name: str) -> BlockSpec:
    """Remove a block (tests register throwaway blocks); returns its spec."""
    _known(name)
    return REGISTRY.pop(name)


def block_recipe(name: str) -> dict[str, object]:
    """The block paper's training settings, {"section.option": value} (empty for a block without a recipe)."""
    return dict(_known(name).recipe)
