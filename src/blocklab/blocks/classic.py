"""The classic blocks: Post-LN, Pre-LN (Xiong et al.) and the parallel block (GPT-J).

Post-LN and Pre-LN also have a decoder block for the encoder-decoder (task="translation"): a causal
self-attention, a cross-attention over the encoder output and the MLP, arranged as the block says:

    post-ln:  u = Norm(x + SA(x));        v = Norm(u + CA(u, m));        y = Norm(v + MLP(v))
    pre-ln:   u = x + SA(Norm(x));        v = u + CA(Norm(u), m);        y = v + MLP(Norm(v))
"""

from __future__ import annotations

import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.blocks.decoder import DecoderBlock
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, canon_layer, norm_layer
from blocklab.registry import DEFAULT_OPTIONS, Predictions, register


class ClassicBlock(nn.Module):
    """The sub-layers of a block built from softmax attention, an MLP and `n_norms` norms (the classic
    blocks, DeepNorm, Peri-LN, Mix-LN, LNS); the subclass's forward arranges them.

    Canon layers (`canon`, the blocks whose spec takes the option): B in the attention, D in the MLP, and
    `canon_a`, `canon_c` for the subclass to put on the attention's and the MLP's normalised inputs (NoCanon,
    the identity, where the config names no such position)."""

    def __init__(self, cfg: ModelConfig, layer: int, n_norms: int, **attn):
        super().__init__()
        self.attn = MultiHeadAttention(cfg, **attn)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias, canon_layer(cfg, "D", cfg.d_ff))
        self.norms = nn.ModuleList(norm_layer(cfg) for _ in range(n_norms))
        self.drop = Dropout(cfg.dropout)  # on each residual branch, as in fairseq; identity at the default 0
        self.canon_a, self.canon_c = canon_layer(cfg, "A", cfg.d_model), canon_layer(cfg, "C", cfg.d_model)


class PostLNDecoderBlock(DecoderBlock):
    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        u = self.norms[0](x + self.drop(self.sa(x, self_mask, cache)))
        v = self.norms[1](u + self.drop(self.ca(u, memory_kv, src_mask)))
        return self.norms[2](v + self.drop(self.mlp(v)))


class PreLNDecoderBlock(DecoderBlock):
    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        u = x + self.drop(self.sa(self.norms[0](x), self_mask, cache))
        v = u + self.drop(self.ca(self.norms[1](u), memory_kv, src_mask))
        return v + self.drop(self.mlp(self.norms[2](v)))


@register(
    "post-ln",
    label="Post-LN",
    family="classic",
    colour="#d62728",
    final_norm=False,
    dropout=True,
    decoder=PostLNDecoderBlock,
    predictions=Predictions(
        hidden_norm="unit",
        hidden_norm_source="unit-gain Norm after each block: d",
        last_ffn_slope=0.0,
        last_ffn_source="Xiong et al. Thm 1: Post-LN constant in L",
    ),
)
class PostLN(ClassicBlock):
    """u = Norm(x + MHA(x)); y = Norm(u + MLP(u))."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)

    def forward(self, x, key_mask=None):
        u = self.norms[0](x + self.drop(self.attn(x, key_mask)))
        return self.norms[1](u + self.drop(self.mlp(u)))


@register(
    "pre-ln",
    label="Pre-LN",
    family="classic",
    colour="#1f77b4",
    dropout=True,
    decoder=PreLNDecoderBlock,
    options=(*DEFAULT_OPTIONS, "canon"),
    predictions=Predictions(
        hidden_norm="residual",
        hidden_norm_source="Xiong et al. Lemma 2 (constants of this config)",
        lemma2_paper=True,
        last_ffn_slope=-0.5,
        last_ffn_source="Xiong et al. Thm 1: Pre-LN ~ 1/sqrt(L)",
    ),
)
class PreLN(ClassicBlock):
    """u = x + MHA(Norm(x)); y = u + MLP(Norm(u)).

    With `canon` (Allen-Zhu 2025's Canon layers): A on Norm(x), B on the attention's q, k, v, C on Norm(u), D
    on the MLP's up-projection, each h + conv(h) (layers.Canon)."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.attn(self.canon_a(self.norms[0](x), key_mask), key_mask))
        return u + self.drop(self.mlp(self.canon_c(self.norms[1](u), key_mask), key_mask))


@register(
    "parallel",
    label="parallel",
    family="classic",
    colour="#9467bd",
    dropout=True,
    predictions=Predictions(
        hidden_norm="residual",
        hidden_norm_source="Xiong et al. Lemma 2 argument (constants of this config)",
        last_ffn_slope=-0.5,
        last_ffn_source="Xiong et al. Thm 1 argument (residual norm ~ L): ~ 1/sqrt(L)",
    ),
)
class Parallel(ClassicBlock):
    """y = x + MHA(Norm(x)) + MLP(Norm(x)), one shared norm."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=1)

    def forward(self, x, key_mask=None):
        h = self.norms[0](x)
        return x + self.drop(self.attn(h, key_mask)) + self.drop(self.mlp(h))
