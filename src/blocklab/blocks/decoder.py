"""What every decoder block of the encoder-decoder (task="translation", model/seq2seq.py) shares.

A decoder block is a causal self-attention, a cross-attention over the encoder output and the MLP
sub-block, arranged as its block type says; the arrangements (`PostLNDecoderBlock`, ...) live next to
their encoder blocks and are named by the block's `BlockSpec.decoder`. Both attentions are the one
`attention.MultiHeadAttention` the encoder blocks use (same projections, same `softmax_attention`, the
same `attn_impl`). Decoding keeps, per decoder layer, the self-attention keys and values of the tokens so
far and the cross-attention keys and values of the source (computed once): each new token costs O(T).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention import KVCache, MultiHeadAttention
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, norm_layer


class LayerCache(KVCache):
    """One decoder layer's keys and values: the source's (fixed, `cross_k`, `cross_v`) and the target
    tokens' so far (`k`, `v`, the self-attention's KVCache). `reorder` (beam search) moves only the
    latter: beams move within their sentence, whose source rows are identical copies."""

    def __init__(self, cross_k, cross_v):
        super().__init__()
        self.cross_k, self.cross_v = cross_k, cross_v

    @property
    def cross_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cross_k, self.cross_v


class DecoderBlock(nn.Module):
    """Self-attention, cross-attention and MLP with `n_norms` norms (three; none for a block without norms, as
    T-Fixup's); subclasses say how they are arranged: `forward(x, memory_kv, src_mask=None, self_mask=None,
    cache=None)`.

    `memory_kv`: the cross-attention's keys and values of the encoder output
    (`cross_attn.keys_values(memory)`); `src_mask` (B, S) and `self_mask` (B, T): True (1) at real source
    and target tokens, None when nothing is padded; `cache`: the layer's LayerCache when decoding."""

    def __init__(self, cfg: ModelConfig, layer: int, n_norms: int = 3):
        super().__init__()
        self.self_attn, self.cross_attn = MultiHeadAttention(cfg, causal=True), MultiHeadAttention(cfg, causal=False)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.norms = nn.ModuleList(norm_layer(cfg) for _ in range(n_norms))
        self.drop = Dropout(cfg.dropout)

    def sa(self, h, self_mask, cache: LayerCache | None):
        """Causal self-attention; with a cache, `h` holds only the new tokens, which see every cached one.

        The keys and values are taken before the queries, the order this block has always used: the
        three gradients into `h` then sum in the same order, and training runs reproduce bit for bit."""
        kv = self.self_attn.keys_values(h)
        if cache is not None:
            kv = cache.append(*kv)
        return self.self_attn(h, self_mask, kv=kv)

    def ca(self, h, memory_kv, src_mask):
        return self.cross_attn(h, src_mask, kv=memory_kv)
