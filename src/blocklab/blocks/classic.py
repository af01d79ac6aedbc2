"""The classic blocks: Post-LN, Pre-LN (Xiong et al.) and the parallel block (GPT-J)."""
from __future__ import annotations

import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.blocks.registry import register
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, make_norm


class _Classic(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, n_norms: int):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias)
        self.norms = nn.ModuleList(make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) for _ in range(n_norms))
        self.drop = Dropout(cfg.dropout)  # on each residual branch, as in fairseq; identity at the default 0


@register("post-ln", final_norm=False)
class PostLN(_Classic):
    """u = Norm(x + MHA(x)); y = Norm(u + MLP(u))."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)

    def forward(self, x, key_mask=None):
        u = self.norms[0](x + self.drop(self.attn(x, key_mask)))
        return self.norms[1](u + self.drop(self.mlp(u)))


@register("pre-ln")
class PreLN(_Classic):
    """u = x + MHA(Norm(x)); y = u + MLP(Norm(u))."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.attn(self.norms[0](x), key_mask))
        return u + self.drop(self.mlp(self.norms[1](u)))


@register("parallel")
class Parallel(_Classic):
    """y = x + MHA(Norm(x)) + MLP(Norm(x)), one shared norm."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=1)

    def forward(self, x, key_mask=None):
        h = self.norms[0](x)
        return x + self.drop(self.attn(h, key_mask)) + self.drop(self.mlp(h))
