"""The successors that rearrange Post-LN / Pre-LN (docs/blocks.md#successors-that-rearrange-post-ln-and-pre-ln): ReZero,
Peri-LN, Mix-LN, LayerNorm Scaling and He et al.'s outlier-protected block. DeepNorm and nGPT have files of their own.

Choices the papers leave open, settled by the authors' code (each written down at its class):
- ReZero: one scalar per layer, shared by both sub-layers (majumderb/rezero, `RZTXEncoderLayer.resweight`).
- Mix-LN: the first floor(N/4) blocks are Post-LN (pixeli99/MixLN runs 3 of 12 and 6 of 24 layers).
- LNS: 1/sqrt(l) with l = 1..N multiplies both norms' outputs, not the final norm (lmsdss/LayerNorm-Scaling).
- OP: bobby-he/simplified_transformers `config/model/op.yaml`; see `OP`.
"""

from __future__ import annotations

import math

import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.blocks.classic import ClassicBlock
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, gain, norm_layer
from blocklab.registry import DEFAULT_OPTIONS, Predictions, register


# No recipe: the paper reports deep ReZero stacks trained without warm-up (Sec. 1) as a result, not as a
# setting of the method, so ReZero runs take the shared recipe like the other blocks.
@register(
    "rezero",
    label="ReZero",
    family="successor",
    colour="#aec7e8",
    final_norm=False,
    has_norms=False,
    dropout=True,
    options=("qk_norm", "attn_gate"),  # no norm layer for norm="dyt" / "derf" to replace
    predictions=Predictions(
        hidden_norm="identity", hidden_norm_source="ReZero: every block is the identity at init (a = 0)"
    ),
)
class ReZero(nn.Module):
    """u = x + a MHA(x); y = u + a MLP(u), no norm, a trainable a = 0 at init (Bachlechner et al. 2020, eq. 5)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.alpha = gain(0.0, 1)  # the paper's alpha_i; one per layer, as the authors' encoder layer
        self.drop = Dropout(cfg.dropout)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.alpha * self.attn(x, key_mask))
        return u + self.drop(self.alpha * self.mlp(u))


@register(
    "peri-ln",
    label="Peri-LN",
    family="successor",
    colour="#ffbb78",
    dropout=True,
    predictions=Predictions(
        hidden_norm="peri",
        hidden_norm_source="Peri-LN: each sub-layer adds a unit-gain Norm's output, d, to a normed input",
    ),
)
class PeriLN(ClassicBlock):
    """u = x + Norm(MHA(Norm(x))); y = u + Norm(MLP(Norm(u))) (Kim et al. 2025, eq. 3; CogView's sandwich);
    the first block also normalises the embedding (the paper's optional y_0 = Norm(x_embed), kept here)."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=4)
        self.embed_norm = norm_layer(cfg) if layer == 0 else nn.Identity()

    def forward(self, x, key_mask=None):
        x = self.embed_norm(x)
        u = x + self.drop(self.norms[1](self.attn(self.norms[0](x), key_mask)))
        return u + self.drop(self.norms[3](self.mlp(self.norms[2](u))))


@register("mix-ln", label="Mix-LN", family="successor", colour="#98df8a", dropout=True)
class MixLN(ClassicBlock):
    """Post-LN for the first floor(N/4) blocks, Pre-LN after them, then the final norm (Li et al. 2024, Sec. 3)."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)
        self.post = layer < cfg.n_layers // 4

    def forward(self, x, key_mask=None):
        if self.post:
            u = self.norms[0](x + self.drop(self.attn(x, key_mask)))
            return self.norms[1](u + self.drop(self.mlp(u)))
        u = x + self.drop(self.attn(self.norms[0](x), key_mask))
        return u + self.drop(self.mlp(self.norms[1](u)))


@register(
    "lns",
    label="LayerNorm Scaling",
    family="successor",
    colour="#c5b0d5",
    dropout=True,
    options=(*DEFAULT_OPTIONS, "canon"),
)
class LNS(ClassicBlock):
    """Pre-LN with each norm's output scaled by 1/sqrt(l), l = 1..N (Sun et al. 2025, eq. 9).

    With `canon`, the Canon layers sit as in Pre-LN, A and C on the scaled norms' outputs."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)
        self.scale = 1.0 / math.sqrt(layer + 1)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.attn(self.canon_a(self.scale * self.norms[0](x), key_mask), key_mask))
        return u + self.drop(self.mlp(self.canon_c(self.scale * self.norms[1](u), key_mask), key_mask))


@register("op", label="OP", family="successor", colour="#f7b6d2", beta_ff=0.2, beta_sa=0.2, has_norms=False)
class OP(nn.Module):
    """u = x + beta_SA MHA(x); y = u + beta_FF MLP(u), QK-norm, no pre-norms (He et al. 2024, Sec. 4).

    As the authors' `op.yaml`: the gains start at 0.2 ("O(1/sqrt(depth))"; `beta_ff`, `beta_sa` change
    them), RMSNorm with a learned gain on each head's queries and keys, a norm on the first block's
    attention input only (its skip carries the raw embedding) and the final norm (`qk_norm=True` is
    then what it always is). op.yaml leaves the gains frozen, with `trainable_*_block_gains` as a
    commented-out option; here they train (docs/blocks.md#op), with no weight decay, as every
    gain. Both norms are the config's kind (RMSNorm by default); the authors' GPT-2
    uses LayerNorm (`--model.norm layernorm`)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm = norm_layer(cfg) if layer == 0 else nn.Identity()
        self.attn = MultiHeadAttention(cfg, qk_norm=True)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.beta_sa = gain(cfg.resolved("beta_sa"))
        self.beta_ff = gain(cfg.resolved("beta_ff"))

    def forward(self, x, key_mask=None):
        u = x + self.beta_sa * self.attn(self.norm(x), key_mask)
        return u + self.beta_ff * self.mlp(u)
