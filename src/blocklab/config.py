"""ModelConfig: every architectural choice, validated at construction (SPEC.md section 4)."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields

from blocklab.registry import REGISTRY, TASKS
from blocklab.validate import choice, positive

# Which block offers which task and whether dropout applies to it are facts of its BlockSpec (registry.py).
NORMS = ("rmsnorm", "layernorm", "dyt")
ACTIVATIONS = ("relu", "gelu")
INITS = ("normal", "xavier")
ATTN_IMPLS = ("auto", "sdpa", "fused", "materialized")
POSITIONS = ("learned", "sinusoidal")
POOLINGS = ("first", "mean")


def model_choices() -> dict[str, tuple[str, ...]]:
    """The valid values of every ModelConfig field that takes one of a list (for --help); blocks as
    registered when called."""
    return {
        "block": tuple(b for b, s in REGISTRY.items() if s.public),
        "task": TASKS,
        "norm": NORMS,
        "activation": ACTIVATIONS,
        "init": INITS,
        "attn_impl": ATTN_IMPLS,
        "positions": POSITIONS,
        "pooling": POOLINGS,
    }


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
    block: str = "pre-ln"
    task: str = "clm"
    vocab_size: int = 8192
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 4
    d_ff: int = 1024
    max_seq_len: int = 256
    norm: str = "rmsnorm"
    activation: str = "relu"
    init: str = "normal"
    attn_impl: str = "auto"  # auto: the measured default per device type, attention.modules.AUTO_IMPL
    beta_ff: float | None = None  # None: the block's default (0.1 where the block has beta_FF)
    beta_sa: float | None = None  # None: 1.0 (sas-p family only)
    beta_v: float = 0.2  # shaped-vp: initial beta_V of W = alpha_V I + beta_V dW
    positions: str = "learned"
    tie_embeddings: bool = True
    mlp_bias: bool = False
    # Biases in MultiHeadAttention's four projections and in the MLP's two Linears (fairseq's Transformer,
    # Xiong et al.'s code, has them). Off by default: SPEC's blocks have no biases.
    bias: bool = False
    norm_eps: float = 1e-5
    # Residual-branch and embedding dropout (classic blocks and translation; 0 keeps the language models
    # exactly as they were). n_decoder_layers: translation only; None means n_layers.
    dropout: float = 0.0
    n_decoder_layers: int | None = None
    # task="classification" only: the head's outputs (1: regression) and what it reads: the first
    # position (the <eod> the inputs start with, BERT's [CLS]) or the mean over the unpadded tokens.
    n_labels: int = 2
    pooling: str = "first"
    # SPEC 2b options for every block: RMSNorm on each head's queries and keys, and the initial alpha of
    # Dynamic Tanh (norm="dyt").
    qk_norm: bool = False
    dyt_alpha: float = 0.5

    def __post_init__(self) -> None:

        choice("block", self.block, tuple(REGISTRY))
        choice("task", self.task, TASKS)
        choice("norm", self.norm, NORMS)
        choice("activation", self.activation, ACTIVATIONS)
        choice("init", self.init, INITS)
        choice("attn_impl", self.attn_impl, ATTN_IMPLS)
        choice("positions", self.positions, POSITIONS)
        choice("pooling", self.pooling, POOLINGS)
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "n_labels"):
            positive(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"choose n_heads among the divisors of d_model"
            )
        for name in ("tie_embeddings", "mlp_bias", "bias", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} is not valid; choose one of: True, False")
        positive("norm_eps", float(self.norm_eps) if isinstance(self.norm_eps, int) else self.norm_eps, float)
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout={self.dropout!r} is not valid; it must be a number in [0, 1)")
        positive("dyt_alpha", float(self.dyt_alpha) if isinstance(self.dyt_alpha, int) else self.dyt_alpha, float)
        spec = REGISTRY[self.block]
        for option, used in (("dyt", self.norm == "dyt"), ("qk_norm", self.qk_norm is True)):
            if used and option not in spec.options:
                value = "norm='dyt'" if option == "dyt" else "qk_norm=True"
                raise ValueError(
                    f"{value} does not apply to block {self.block!r}; it applies to: "
                    f"{', '.join(b for b, s in REGISTRY.items() if option in s.options)}"
                )
        if self.dropout and not spec.dropout:
            raise ValueError(
                f"dropout={self.dropout!r} does not apply to block {self.block!r}; "
                f"it applies to: {', '.join(b for b, s in REGISTRY.items() if s.dropout)}"
            )
        if self.n_decoder_layers is not None:
            positive("n_decoder_layers", self.n_decoder_layers)
            if self.task != "translation":
                raise ValueError(f"n_decoder_layers={self.n_decoder_layers!r} applies to task='translation' only")
        if self.task not in spec.tasks:
            raise ValueError(
                f"block={self.block!r} is not offered for task={self.task!r}; "
                f"choose one of: {', '.join(b for b, s in REGISTRY.items() if self.task in s.tasks)}"
            )
        for name, default in (("beta_ff", spec.beta_ff), ("beta_sa", spec.beta_sa)):
            value = getattr(self, name)
            if value is None:
                continue
            if default is None:
                owners = ", ".join(b for b, s in REGISTRY.items() if getattr(s, name) is not None)
                raise ValueError(f"{name}={value!r} does not apply to block {self.block!r}; it applies to: {owners}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}={value!r} is not valid; it must be a number")
        if isinstance(self.beta_v, bool) or not isinstance(self.beta_v, (int, float)):
            raise ValueError(f"beta_v={self.beta_v!r} is not valid; it must be a number")

    @property
    def causal(self) -> bool:
        return self.task == "clm"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def resolved(self, name: str) -> float:
        """beta_ff / beta_sa with the block's default filled in."""

        value = getattr(self, name)
        return value if value is not None else getattr(REGISTRY[self.block], name)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        return cls(**d)
