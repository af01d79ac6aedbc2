"""The simplified blocks of He & Hofmann: no attention skip, shaped attention, then no V/P, parallel, no norms."""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention import IdentityPlus, ShapedAttention
from blocklab.config import ModelConfig
from blocklab.layers import MLP, gain, norm_layer
from blocklab.registry import DEFAULT_OPTIONS, Predictions, register

# attn_gate (docs/blocks.md#attn_gate) gates softmax attention's output before W^O (Qiu et al. 2025). Shaped attention
# is not that: SAS has no W^O, and a gate (sigmoid, about 1/2 at init) would undo the identity at init these blocks are
# built on, so they refuse it; norm="dyt" / "derf" and qk_norm (a zero query stays zero) apply.
SHAPED_OPTIONS = tuple(o for o in DEFAULT_OPTIONS if o != "attn_gate")

# The probes' source for every prediction below: shaped attention is the identity at init (He & Hofmann),
# then the variance argument of Xiong et al.'s Lemma 2.
_HH = "He & Hofmann identity at init + Lemma 2 variance argument"


def sas(cfg: ModelConfig, layer: int) -> ShapedAttention:
    """SAS: no value and no projection, except W^V = I + dW in the first block."""
    return ShapedAttention(cfg, value=IdentityPlus(cfg.d_model) if layer == 0 else None)


class _Sequential(nn.Module):
    """u = Attn(Norm(x)); y = u + beta_FF MLP(Norm(u)), for the attention sub-block `attn`."""

    def __init__(self, cfg: ModelConfig, attn: nn.Module):
        super().__init__()
        self.norm1 = norm_layer(cfg)
        self.attn = attn
        self.norm2 = norm_layer(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.beta_ff = gain(cfg.resolved("beta_ff"))

    def forward(self, x, key_mask=None):
        u = self.attn(self.norm1(x), key_mask)
        return u + self.beta_ff * self.mlp(self.norm2(u))


@register(
    "v-skipinit",
    label="V-SkipInit",
    family="simplified",
    colour="#8c564b",
    beta_ff=0.1,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="value-projection", hidden_norm_source=_HH),
)
class VSkipInit(_Sequential):
    """Attention matrix alpha I + beta A(X) (alpha=1, beta=0 at init) with W^V, W^P; MLP keeps its skip."""

    def __init__(self, cfg, layer):
        d = cfg.d_model
        attn = ShapedAttention(
            cfg,
            alpha=1.0,
            beta=0.0,
            gamma=None,
            zero_query=False,
            value=nn.Linear(d, d, bias=False),
            proj=nn.Linear(d, d, bias=False),
        )
        super().__init__(cfg, attn)


@register(
    "shaped-vp",
    label="shaped value/projection",
    family="simplified",
    colour="#e377c2",
    beta_ff=0.1,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="identity-attention", hidden_norm_source=_HH),
)
class ShapedVP(_Sequential):
    """SAS with W^V, W^P kept as alpha_V I + beta_V dW, to watch beta_V / alpha_V during training."""

    def __init__(self, cfg, layer):
        d, b = cfg.d_model, cfg.beta_v
        attn = ShapedAttention(cfg, value=IdentityPlus(d, 1.0, b), proj=IdentityPlus(d, 1.0, b))
        super().__init__(cfg, attn)


@register(
    "sas",
    label="SAS",
    family="simplified",
    colour="#ff7f0e",
    beta_ff=0.1,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="identity-attention", hidden_norm_source=_HH),
)
class SAS(_Sequential):
    """u = SAS(Norm(x)); y = u + beta_FF MLP(Norm(u))."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, sas(cfg, layer))


@register(
    "sas-p",
    label="SAS-P",
    family="simplified",
    colour="#2ca02c",
    beta_ff=0.1,
    beta_sa=1.0,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="no-skip", hidden_norm_source=_HH),
)
class SASP(nn.Module):
    """y = beta_SA SAS(Norm(x)) + beta_FF MLP(Norm(x)): no skip at all, one shared norm."""

    def __init__(self, cfg: ModelConfig, layer: int, norm: bool = True):
        super().__init__()
        self.norm = norm_layer(cfg) if norm else nn.Identity()
        self.attn = sas(cfg, layer)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.beta_sa = gain(cfg.resolved("beta_sa"))
        self.beta_ff = gain(cfg.resolved("beta_ff"))

    def forward(self, x, key_mask=None):
        h = self.norm(x)
        return torch.addcmul(self.beta_sa * self.attn(h, key_mask), self.beta_ff, self.mlp(h))


@register(
    "sas-p-nonorm",
    label="SAS-P without norms",
    family="simplified",
    colour="#bcbd22",
    beta_ff=0.1,
    beta_sa=1.0,
    has_norms=False,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="no-skip-no-norm", hidden_norm_source=_HH),
)
class SASPNoNorm(SASP):
    """sas-p without norms, except on the first block's input (and the model's final norm)."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, norm=layer == 0)


@register(
    "softmax-noskip",
    label="softmax-noskip",
    family="ablation",
    colour="#7f7f7f",
    beta_ff=0.1,
    options=SHAPED_OPTIONS,
    predictions=Predictions(hidden_norm="softmax-no-skip", hidden_norm_source=_HH),
)
class SoftmaxNoSkip(_Sequential):
    """Ablation for rank collapse: u = A(Norm(x)) Norm(x), plain softmax attention and no skip."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, ShapedAttention(cfg, alpha=0.0, beta=1.0, gamma=None, zero_query=False))
