"""The small layers every block shares: norms, the MLP, trainable gains and the Linear that says how it
starts."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / rms(x) * weight (no centring, no bias)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Under autocast a 16-bit input meets the fp32 gain, and F.rms_norm then falls back to its unfused
        # composite (many kernels, fp32 temporaries). That composite computes in the wider type and rounds to
        # x's; doing so explicitly gives the same numbers from the fused kernel (benchmarks/RESULTS.md, H200).
        wide = torch.promote_types(x.dtype, self.weight.dtype)
        return F.rms_norm(x.to(wide), (x.shape[-1],), self.weight.to(wide), self.eps).to(x.dtype)


class DyT(nn.Module):
    """Dynamic Tanh, DyT(x) = g * tanh(a x) + b (Zhu et al. 2025, arXiv 2503.10622, eq. 1): one trainable
    scalar a (init `alpha`, the paper's alpha_0 = 0.5), g ones and b zeros of width d, as in the authors' code."""

    def __init__(self, d: int, alpha: float):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, self.weight, torch.tanh(self.a * x))


class Derf(nn.Module):
    """Dynamic erf, Derf(x) = g * erf(a x + s) + b (Chen et al. 2025, "Stronger Normalization-Free Transformers",
    arXiv 2512.10938): a trainable scalar a (init `alpha`; the paper's and its ViT code's default 0.5),
    a trainable scalar shift s (init 0), g ones and b zeros of width d.

    What the paper leaves open, as the official code (zlab-princeton/Derf, `Dynamic_erf` in ViT/dynamic_erf.py
    and the GPT-2 patch) settles it: s is one scalar per layer, not a vector, and it shifts erf's argument,
    erf(a x + s), not its output. a and s are scalars and g, b vectors, so none gets weight decay (the
    package's rule for every parameter of fewer than 2 dimensions, model/params.py; the GPT-2 patch's
    nanoGPT optimizer decays only >= 2-D parameters too). The GPT-2 patch also multiplies the embedding by
    a learnable sqrt(d) (`shared_scale`) and starts a at 1.0: a recipe of that model, outside the layer,
    not taken here (the layer is what docs/blocks.md#derf names; `derf_alpha` sets a's start)."""

    def __init__(self, d: int, alpha: float):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(alpha)))
        self.s = nn.Parameter(torch.tensor(0.0))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, self.weight, torch.erf(torch.addcmul(self.s, self.a, x)))


# The norms that are elementwise functions with no statistics (DyT, Derf): not scale-free, so a law that
# assumes a unit-gain norm (probes/predictions.py) does not hold under them, and they replace even the norms a
# block's paper fixes to RMSNorm (attn-res's key norm).
POINTWISE_NORMS = {"dyt": DyT, "derf": Derf}


def make_norm(kind: str, d: int, eps: float, dyt_alpha: float, derf_alpha: float = 0.5) -> nn.Module:
    """The one place that maps the config's `norm` to a module; `dyt_alpha` / `derf_alpha` start DyT's / Derf's a."""
    if kind == "rmsnorm":
        return RMSNorm(d, eps)
    if kind == "dyt":
        return DyT(d, dyt_alpha)
    if kind == "derf":
        return Derf(d, derf_alpha)
    return nn.LayerNorm(d, eps=eps)


def norm_layer(cfg) -> nn.Module:
    """A norm of width d_model as a ModelConfig asks for (every block's and the stack's norms)."""
    return make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.dyt_alpha, cfg.derf_alpha)


def l2_normalise(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x / |x| along `dim` (nGPT's Norm: onto the unit sphere, no gain, no centring)."""
    return F.normalize(x, dim=dim, eps=1e-12)


class InitRule(enum.Enum):
    """How model.base.init_weights draws a Linear's weight."""

    CONFIG = "config"  # the config's `init`: N(0, 0.02^2) under "normal", Xavier-uniform at the gain under "xavier"
    ZEROS = "zeros"  # zero under either init (shaped attention's W^Q, the dW of I + dW)
    XAVIER_NORMAL = "xavier_normal"  # Xavier-normal at the gain under either init (DeepNorm's)
    XAVIER_UNIFORM = "xavier_uniform"  # Xavier-uniform at the gain under either init (T-Fixup's)
    FAN_IN_NORMAL = "fan_in_normal"  # N(0, gain^2 / fan_in) under either init (MUDDFormer's W1)


@dataclass(frozen=True)
class WeightInit:
    """A Linear's initialisation as its module declares it (`Linear.weight_init`); the bias, if any, always
    starts at zero. `gain` is Xavier's gain where the rule draws Xavier (it is unused otherwise)."""

    rule: InitRule = InitRule.CONFIG
    gain: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.rule, InitRule):
            raise ValueError(f"WeightInit rule={self.rule!r} is not valid; give an InitRule")


DEFAULT_INIT = WeightInit()  # what every plain nn.Linear gets


class Linear(nn.Linear):
    """nn.Linear that declares how init_weights starts it (`weight_init`); a plain nn.Linear starts as
    DEFAULT_INIT says. A block that needs another start than the one its sub-layer declares (DeepNorm)
    assigns `weight_init` before init_weights runs. The constructor draws what nn.Linear's draws, so
    building one instead of an nn.Linear leaves the random stream as it was."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, weight_init: WeightInit = DEFAULT_INIT):
        super().__init__(in_features, out_features, bias=bias)
        self.weight_init = weight_init


def weight_init_of(linear: nn.Linear) -> WeightInit:
    """How init_weights starts `linear`: its declared WeightInit, DEFAULT_INIT for a plain nn.Linear."""
    return linear.weight_init if isinstance(linear, Linear) else DEFAULT_INIT


@dataclass(frozen=True)
class EmbeddingInit:
    """A token embedding's start as a block's paper fixes it, whatever the config's `init` says: entries drawn
    N(0, std^2) by init_weights. What the model multiplies the looked-up rows by stays the config's (sqrt(d) under
    "xavier", 1 under "normal"); a tied output head uses the stored matrix."""

    std: float

    def __post_init__(self) -> None:
        if isinstance(self.std, bool) or not isinstance(self.std, (int, float)) or not self.std > 0:
            raise ValueError(f"EmbeddingInit std={self.std!r} is not valid; it must be a positive number")


class Embedding(nn.Embedding):
    """nn.Embedding that declares how init_weights starts it (`weight_init`): an EmbeddingInit, or None for the
    config's init (N(0, 0.02^2) under "normal", N(0, 1/d) under "xavier"). The constructor draws what
    nn.Embedding's draws, so building one instead leaves the random stream as it was."""

    def __init__(self, num_embeddings: int, embedding_dim: int, weight_init: EmbeddingInit | None = None):
        super().__init__(num_embeddings, embedding_dim)
        self.weight_init = weight_init


def embedding_init_of(embedding: nn.Embedding) -> EmbeddingInit | None:
    """How init_weights starts `embedding`: its declared EmbeddingInit, None (the config's) for a plain one."""
    return embedding.weight_init if isinstance(embedding, Embedding) else None


class Canon(nn.Conv1d):
    """h <- h + conv(h): a Canon layer (Allen-Zhu 2025, Physics of Language Models 4.1, arXiv 2512.17351), a
    causal depthwise convolution over positions, `kernel` taps per channel, added to its input.

    As the official code settles it (facebookresearch/PhysicsLM4, huggingface/canon_helper.py `ShortConvolution`
    and `create_canon`, with LlamaCanonConfig's defaults): an nn.Conv1d with one group per channel, padding
    kernel - 1 and the first T outputs kept (causal), no bias, no activation, the residual on
    (`canon_residual`); padded positions are zeroed before the convolution (`x.mul_(mask)`), so a left-padded
    row sees zeros before its first token, as a row without padding does. Its weights start as the code starts
    them: `reset_parameters()`, nn.Conv1d's own draw, uniform in +-1/sqrt(kernel) (the constructor's; the
    model's init_weights leaves convolutions alone). The weight is 3-D, so it gets weight decay, as every matrix
    here (the code's optimizer decays every parameter)."""

    def __init__(self, width: int, kernel: int = 4):
        super().__init__(width, width, kernel, groups=width, padding=kernel - 1, bias=False)

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = h if key_mask is None else h * key_mask.unsqueeze(-1).to(h.dtype)
        y = super().forward(x.transpose(-1, -2))[..., : h.shape[-2]]
        return h + y.transpose(-1, -2)


class NoCanon(nn.Module):
    """Where a block has no Canon layer: h as it is."""

    def forward(self, h: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        return h


def canon_layer(cfg, position: str, width: int) -> nn.Module:
    """The Canon layer the config asks for at `position` (one of A, B, C, D), `width` channels; else NoCanon."""
    return Canon(width) if cfg.canon is not None and position in cfg.canon else NoCanon()


class MLP(nn.Module):
    """MLP(x) = W2 act(W1 x).

    Two optional parts: `canon` (a Canon layer, or NoCanon) on W1 x before the activation (Canon's position D,
    "after the up-projection"), and `mid_norm`, a norm of width d_ff on act(W1 x) before W2 (NormFormer's)."""

    def __init__(
        self,
        d: int,
        d_ff: int,
        activation: str,
        bias: bool = False,
        canon: nn.Module | None = None,
        mid_norm: nn.Module | None = None,
    ):
        super().__init__()
        self.fc1 = Linear(d, d_ff, bias=bias)
        self.fc2 = Linear(d_ff, d, bias=bias)
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.canon = canon if canon is not None else NoCanon()
        self.mid_norm = mid_norm if mid_norm is not None else nn.Identity()

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        # On 2-D rows, so that the activation feeds fc2's matmul with no view in between. With a
        # (B, T, d) input, torch.compile's partitioner sees the ReLU output and its 2-D view as two
        # tensors and saves a separate bool mask `relu <= 0` for the backward; the CPU code inductor
        # writes for bool loads and stores is about 40x slower than for bf16 (torch 2.13: 20 ms
        # forward + 12 ms backward per layer at 1024 x 3072 on one thread, against 1.5 ms without it).
        # On 2-D rows the mask is recomputed from the saved ReLU output. Same math, eager unchanged.
        rows = x.reshape(-1, x.shape[-1])
        up = self.fc1(rows)
        if isinstance(self.canon, Canon):  # over positions: the (B, T, d_ff) view, then rows again
            up = self.canon(up.view(*x.shape[:-1], -1), key_mask).reshape(rows.shape[0], -1)
        return self.fc2(self.mid_norm(self.act(up))).view(*x.shape[:-1], -1)


class Dropout(nn.Dropout):
    """nn.Dropout that is the exact identity at p=0 (the language models' default), in training too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) if self.p > 0 and self.training else x


class Scale(nn.Module):
    """A trainable vector stored at `scaling` and used as stored * value / scaling (nGPT Sec. 2.5)."""

    def __init__(self, n: int, value: float, scaling: float):
        super().__init__()
        self.s = gain(scaling, n)
        self.factor = value / scaling

    def forward(self) -> torch.Tensor:
        return self.s * self.factor


def gain(value: float, *shape: int) -> nn.Parameter:
    """A trainable gain (alpha, beta, gamma, beta_FF, ...); 1-D or scalar, so it gets no weight decay."""
    return nn.Parameter(torch.full(shape, float(value)))
