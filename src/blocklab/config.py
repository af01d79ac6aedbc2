"""ModelConfig: every architectural choice, validated at construction (docs/models.md#the-model-config)."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields

from blocklab.block_table import BUILTIN_BLOCKS, gain_default
from blocklab.errors import ConfigError
from blocklab.registry import PUBLIC_BLOCKS, REGISTRY, TASKS, block_names
from blocklab.settings import KEY, OnlyWhere, only_where, setting, validate

# Which block offers which task and whether dropout applies to it are facts of its BlockSpec (registry.py).
NORMS = ("rmsnorm", "layernorm", "dyt", "derf")
ACTIVATIONS = ("relu", "gelu")
INITS = ("normal", "xavier")
ATTN_IMPLS = ("auto", "sdpa", "fused", "materialized")
POSITIONS = ("learned", "sinusoidal")
POOLINGS = ("first", "mean")
# canon: the positions A, B, C, D, any of them once each and in that order.
CANON_SETS = tuple("".join(c for i, c in enumerate("ABCD") if k >> i & 1) for k in range(1, 16))


def only_blocks(*names: str):
    """A setting's `applies` rule: it means something to these blocks only (they alone read it)."""
    return only_where("block", *names)


def misapplied_block_knob(cfg: ModelConfig) -> tuple[str, OnlyWhere] | None:
    """The first block-only knob (an `only_blocks` rule) of `cfg` set away from its default on a block it means
    nothing to: (its name, its rule), or None. The default passes anywhere: a resolved config lists every setting."""
    for f in fields(cfg):
        rule = f.metadata[KEY].applies if KEY in f.metadata else None
        if (
            isinstance(rule, OnlyWhere)
            and rule.key == "block"
            and not rule(vars(cfg))
            and getattr(cfg, f.name) != f.default
        ):
            return f.name, rule
    return None


def has_gain(name: str):
    """A setting's `applies` rule for beta_ff / beta_sa: the block has that gain."""

    def rule(c) -> bool:
        facts = BUILTIN_BLOCKS.get(c["block"])
        return getattr(facts if facts is not None else REGISTRY[c["block"]], name) is not None

    return rule


def reject_unknown(cls):
    """Unknown keyword -> ValueError naming it, its value and the valid options (a dataclass raises TypeError)."""
    init, names = cls.__init__, [f.name for f in fields(cls)]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise ValueError(
                f"{unknown[0]}={kwargs[unknown[0]]!r} is not a {cls.__name__} option; choose among: {', '.join(names)}"
            )
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@reject_unknown
@dataclass
class ModelConfig:
    block: str = setting(
        "pre-ln",
        help="the Transformer block; the block table gives each one's equation",
        # Torch-free until a valid block is built: --help and a bad name answer without importing the blocks.
        choices=block_names,
        shown_choices=tuple(PUBLIC_BLOCKS),
    )
    task: str = setting(
        "clm",
        help="causal LM, masked LM, encoder-decoder translation, or sequence classification (blocklab finetune)",
        choices=TASKS,
    )
    vocab_size: int = setting(
        8192,
        help="embedding rows and output classes (8192 when ModelConfig is built directly)",
        derived="data.vocab_size",
        min=1,
    )
    d_model: int = setting(256, help="the residual stream's width; a multiple of n_heads", min=1)
    n_layers: int = setting(6, help="blocks in the stack (the encoder's, for translation)", min=1)
    n_heads: int = setting(4, help="attention heads per block", min=1)
    d_ff: int = setting(1024, help="the MLP's hidden width", min=1)
    max_seq_len: int = setting(
        256,
        help="longest input the positions cover (256 when ModelConfig is built directly)",
        derived="data.seq_len",
        unit="tokens",
        min=1,
    )
    norm: str = setting(
        "rmsnorm", help="the norm layers; dyt: Dynamic Tanh, derf: Dynamic erf, in place of every norm", choices=NORMS
    )
    activation: str = setting("relu", help="the MLP's activation", choices=ACTIVATIONS)
    init: str = setting("normal", help="weight initialisation (the block's own scalings apply on top)", choices=INITS)
    attn_impl: str = setting(
        "auto",
        help="attention path; auto: the one measured fastest and checked correct on the device (the README's attention paths)",
        choices=ATTN_IMPLS,
    )
    beta_ff: float | None = setting(
        None,
        help="gain on the MLP branch of the blocks that have one; none: the block's own; other blocks refuse it",
        derived=lambda: gain_default("beta_ff"),
        applies=has_gain("beta_ff"),
    )
    beta_sa: float | None = setting(
        None,
        help="gain on the attention branch of the blocks that have one; none: the block's own; other blocks refuse it",
        derived=lambda: gain_default("beta_sa"),
        applies=has_gain("beta_sa"),
    )
    beta_v: float = setting(
        0.2, help="shaped-vp only: initial beta_V of W = alpha_V I + beta_V dW", applies=only_blocks("shaped-vp")
    )
    hc_streams: int = setting(
        4,
        help="hyper-connections and mhc: the number n of residual streams",
        min=1,
        applies=only_blocks("hyper-connections", "mhc"),
    )
    hc_dynamic: bool = setting(
        True,
        help="hyper-connections and frac-connections: connections that depend on the input (dynamic); false: static ones",
        applies=only_blocks("hyper-connections", "frac-connections"),
    )
    frac_fractions: int = setting(
        2,
        help="frac-connections: the number m of fractions the d-wide state is split into; divides d_model",
        min=1,
        applies=only_blocks("frac-connections"),
    )
    attn_res_block: int = setting(
        0,
        help="attn-res: sub-layers per block of Block AttnRes; 0: every earlier sub-layer output is a source",
        unit="sub-layers",
        min=0,
        applies=only_blocks("attn-res"),
    )
    denseformer_dilation: int = setting(
        1,
        help="denseformer: each depth-weighted average reads every k-th earlier block output",
        min=1,
        applies=only_blocks("denseformer"),
    )
    denseformer_period: int = setting(
        1,
        help="denseformer: a depth-weighted average after every p-th block only",
        unit="blocks",
        min=1,
        applies=only_blocks("denseformer"),
    )
    value_residual_learnable: bool = setting(
        False,
        help="value-residual: the value-mixing lambdas are trained (init 0.5); false: fixed at 0.5",
        applies=only_blocks("value-residual"),
    )
    laurel_rank: int = setting(
        32, help="laurel: the rank r of the learned low-rank path B A", min=1, applies=only_blocks("laurel")
    )
    normformer_head_scale: str = setting(
        "heads",
        help="normformer: where the per-head scales act; heads: on each head's output before W^O (the paper), output: on the d_h-wide slices of W^O's output (fairseq's code)",
        choices=("heads", "output"),
        applies=only_blocks("normformer"),
    )
    hybridnorm_first_pre: bool = setting(
        False,
        help="hybridnorm: block 0 is a Pre-LN block, QKV-norm kept (HybridNorm*); false: every block HybridNorm",
        applies=only_blocks("hybridnorm"),
    )
    positions: str = setting("learned", help="position embeddings", choices=POSITIONS)
    tie_embeddings: bool = setting(True, help="the output layer shares the input embedding's weights")
    mlp_bias: bool = setting(False, help="biases in the MLP's two linear layers")
    # fairseq's Transformer (Xiong et al.'s code) has biases; the simplified blocks' equations do not.
    bias: bool = setting(False, help="biases in the attention's four projections and in the MLP")
    norm_eps: float = setting(1e-5, help="epsilon of every norm layer", min=0, min_exclusive=True)
    # 0 keeps the language models free of dropout; only blocks whose spec allows it accept another value.
    dropout: float = setting(
        0.0,
        help="residual-branch and embedding dropout (classic blocks and translation)",
        min=0,
        max=1,
        max_exclusive=True,
    )
    n_decoder_layers: int | None = setting(
        None,
        help="translation only: decoder blocks",
        derived="model.n_layers",
        min=1,
        applies=only_where("task", "translation"),
    )
    n_labels: int = setting(
        2,
        help="classification only: the head's outputs (1: regression)",
        min=1,
        applies=only_where("task", "classification"),
    )
    pooling: str = setting(
        "first",
        help="classification only: what the head reads, the first position (the leading end-of-document token) or the mean",
        choices=POOLINGS,
        applies=only_where("task", "classification"),
    )
    qk_norm: bool = setting(False, help="RMSNorm on each head's queries and keys (any block built from norms)")
    dyt_alpha: float = setting(
        0.5,
        help="norm=dyt only: the initial alpha of tanh(alpha x)",
        min=0,
        min_exclusive=True,
        applies=only_where("norm", "dyt"),
    )
    derf_alpha: float = setting(
        0.5,
        help="norm=derf only: the initial alpha of erf(alpha x + s)",
        min=0,
        min_exclusive=True,
        applies=only_where("norm", "derf"),
    )
    attn_gate: bool | str = setting(
        False,
        help="gated attention, W^O [SDPA(.) * sigmoid(x W_g)]: true, one gate per channel; headwise, one per head",
        choices=(False, True, "headwise"),
    )
    canon: str | None = setting(
        None,
        help="Canon layers h + conv(h), a causal depthwise convolution of kernel 4, at the positions named: A before the attention, B on its queries, keys and values, C before the MLP, D after its up-projection; any of ABCD, in that order",
        derived="none: no Canon layer",
    )

    def __post_init__(self) -> None:
        validate(self)
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"choose n_heads among the divisors of d_model"
            )
        spec = REGISTRY[self.block]
        options = (
            ("dyt", self.norm == "dyt", "norm='dyt'"),
            ("derf", self.norm == "derf", "norm='derf'"),
            ("qk_norm", self.qk_norm is True, "qk_norm=True"),
            ("attn_gate", self.attn_gate is not False, f"attn_gate={self.attn_gate!r}"),
            ("canon", self.canon is not None, f"canon={self.canon!r}"),
        )
        if self.canon is not None and self.canon not in CANON_SETS:
            raise ConfigError(
                f"canon={self.canon!r} is not valid; name any of the positions A, B, C, D once each, in that "
                "order (ABCD: all four), or none for no Canon layer"
            )
        for option, used, value in options:
            if used and option not in spec.options:
                raise ConfigError(
                    f"{value} does not apply to block {self.block!r}; it applies to: "
                    f"{', '.join(b for b, s in REGISTRY.items() if option in s.options)}"
                )
        if self.dropout and not spec.dropout:
            raise ConfigError(
                f"dropout={self.dropout!r} does not apply to block {self.block!r}; "
                f"it applies to: {', '.join(b for b, s in REGISTRY.items() if s.dropout)}"
            )
        if self.canon and self.task == "translation":
            raise ConfigError(
                f"canon={self.canon!r} does not apply to task='translation' (its decoder decodes step by step, "
                "which a convolution over positions would need a state for); it applies to: clm, mlm, classification"
            )
        if self.block == "frac-connections" and self.d_model % self.frac_fractions:
            raise ConfigError(
                f"frac_fractions={self.frac_fractions} does not divide d_model={self.d_model}; choose a divisor of d_model"
            )
        if self.n_decoder_layers is not None and self.task != "translation":
            raise ConfigError(f"n_decoder_layers={self.n_decoder_layers!r} applies to task='translation' only")
        if self.task not in spec.tasks:
            raise ConfigError(
                f"block={self.block!r} is not offered for task={self.task!r}; "
                f"choose one of: {', '.join(b for b, s in REGISTRY.items() if self.task in s.tasks)}"
            )
        if (knob := misapplied_block_knob(self)) is not None:
            name, rule = knob
            raise ConfigError(
                f"{name}={getattr(self, name)!r} does not apply to block {self.block!r}; "
                f"it applies to: {', '.join(rule.values)}"
            )
        for name, default in (("beta_ff", spec.beta_ff), ("beta_sa", spec.beta_sa)):
            value = getattr(self, name)
            if value is not None and default is None:
                owners = ", ".join(b for b, s in REGISTRY.items() if getattr(s, name) is not None)
                raise ConfigError(f"{name}={value!r} does not apply to block {self.block!r}; it applies to: {owners}")

    @property
    def causal(self) -> bool:
        return self.task == "clm"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def rough_parameters(self) -> int:
        """The embedding and each layer's attention and MLP matrices, no norms, biases or block extras: a size
        known without building the model (to choose the meta device, to order runs by their work)."""
        return self.vocab_size * self.d_model + self.n_layers * (4 * self.d_model**2 + 2 * self.d_model * self.d_ff)

    def resolved(self, name: str) -> float:
        """beta_ff / beta_sa with the block's default filled in."""

        value = getattr(self, name)
        return value if value is not None else getattr(REGISTRY[self.block], name)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        return cls(**d)
