"""What every decoder block of the encoder-decoder (task="translation", model/seq2seq.py) shares.

A decoder block is a causal self-attention, a cross-attention over the encoder output and the MLP
sub-block, arranged as its block type says; the arrangements (`PostLNDecoderBlock`, ...) live next to
their encoder blocks and are named by the block's `BlockSpec.decoder`. Decoding keeps, per decoder
layer, the self-attention keys and values of the tokens so far and the cross-attention keys and values
of the source (computed once): each new token costs O(T).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab.attention.functional import merge_heads, split_heads
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, make_norm


class Attention(nn.Module):
    """MHA(x, m) = concat_h(softmax(Q_h K_h^T / sqrt(d_h)) V_h) W^P with Q from x and K, V from m."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def keys_values(self, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return split_heads(self.k(m), self.n_heads), split_heads(self.v(m), self.n_heads)

    def forward(self, x, k, v, mask=None, causal=False):
        """`mask`: boolean, True where a query may attend a key, broadcastable to (B, H, Tq, Tk)."""
        q = split_heads(self.q(x), self.n_heads)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        return self.proj(merge_heads(out))


class LayerCache:
    """One decoder layer's keys and values: the source's (fixed) and the target tokens' so far."""

    def __init__(self, cross_k, cross_v):
        self.cross_k, self.cross_v = cross_k, cross_v
        self.k = self.v = None

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], 2)
        self.v = v if self.v is None else torch.cat([self.v, v], 2)
        return self.k, self.v

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the rows `index` (beam search). Beams move only within their sentence, whose source rows
        are identical copies, so the cross-attention keys and values stay where they are."""
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]


class DecoderBlock(nn.Module):
    """Self-attention, cross-attention and MLP with three norms; subclasses say how they are arranged:
    `forward(x, memory_kv, src_mask=None, self_mask=None, cache=None)`."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.self_attn, self.cross_attn = Attention(cfg), Attention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias)
        self.norms = nn.ModuleList(make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) for _ in range(3))
        self.drop = Dropout(cfg.dropout)

    def sa(self, h, self_mask, cache: LayerCache | None):
        """Causal self-attention; with a cache, `h` holds only the new token, which may see every cached one."""
        k, v = self.self_attn.keys_values(h)
        if cache is not None:
            k, v = cache.append(k, v)
            return self.self_attn(h, k, v)
        return self.self_attn(h, k, v, self_mask, causal=True)

    def ca(self, h, memory_kv, src_mask):
        return self.cross_attn(h, *memory_kv, src_mask)
