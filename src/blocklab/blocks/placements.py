"""The last norm placements (docs/blocks.md#norm-placements-and-initialisations): HybridNorm (Zhuo et al. 2025, arXiv
2503.04598; official code BryceZhuo/HybridNorm) and ResiDual (Xie et al. 2023, arXiv 2304.14802; official code
microsoft/ResiDual).

Both mix Pre-LN and Post-LN inside one stack. HybridNorm normalises inside the attention (each head's
queries, keys and values) instead of before it, and puts the MLP's norm after the attention's residual sum;
ResiDual runs a Post-LN stream and a Pre-LN-like sum of the same sub-layer outputs side by side and adds the
two at the end. HybridNorm is for clm and mlm (and classification, which reuses the encoder); ResiDual, a
translation paper's block, has a translation decoder too.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.decoder import DecoderBlock
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, make_norm, norm_layer
from blocklab.registry import DEFAULT_OPTIONS, register

# ----------------------------------------------------------------------------------------------- HybridNorm


class QKVNorm(nn.Module):
    """The config's norm, d_h wide, on each head's queries (`q`), keys (`k`) and values (`v`): one gain each,
    shared by the heads, as the official code's `q_norm`, `k_norm`, `v_norm` (size d_model // n_heads)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.q, self.k, self.v = (
            make_norm(cfg.norm, cfg.d_head, cfg.norm_eps, cfg.dyt_alpha, cfg.derf_alpha) for _ in range(3)
        )


class QKVNormAttention(MultiHeadAttention):
    """MHA_QKV(X) = concat_h softmax(N(Q_h) N(K_h)^T / sqrt(d_h)) N(V_h) W^O, Q = X W^Q, K = X W^K, V = X W^V.

    The norms sit where the qk_norm option's do (attribute `qk_norm`, which MultiHeadAttention applies to the
    queries and keys) plus one on the values, applied after the head split and before the dot product, as
    in the official code's `attention` (q_norm, k_norm, v_norm on the (B, H, T, d_h) heads)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.qk_norm = QKVNorm(cfg)

    def keys_values(self, m: torch.Tensor, values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = super().keys_values(m, values)  # keys already normalised by qk_norm.k
        return k, self.qk_norm.v(v)


@register(
    "hybridnorm",
    label="HybridNorm",
    family="successor",
    colour="#637939",
    dropout=True,
    # The block always normalises queries and keys (and values) with the config's norm: qk_norm=True would
    # add nothing, so it is refused rather than silently ignored.
    options=tuple(o for o in DEFAULT_OPTIONS if o != "qk_norm"),
)
class HybridNorm(nn.Module):
    """x_m = x + MHA(N(x W_Q), N(x W_K), N(x W_V)) W_O; y = N(x_m) + MLP(N(x_m)), N per head on q, k, v (Zhuo et al. 2025).

    QKV-Norm in the attention, no norm on the attention's input (the attention reads x itself), and the MLP in
    HybridNorm's Post-Norm position: the norm of x_m is both the MLP's input and the skip,
    y = N(x_m) + FFN(N(x_m)), not Post-LN's N(x_m + FFN(x_m)). The q, k, v norms are the config's norm at width
    d_h (norm="dyt" or "derf" replaces them too). Under attn_gate the gate reads x itself, as there is no
    attention pre-norm to read. A final norm follows the last block.

    `hybridnorm_first_pre=True` is HybridNorm*: block 0 is Pre-LN, u = x + MHA_QKV(N(x)); y = u + MLP(N(u)),
    its QKV norms kept.

    What the official code (BryceZhuo/HybridNorm) settles, and what is not taken: docs/blocks.md#hybridnorm.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.pre = cfg.hybridnorm_first_pre and layer == 0
        self.attn = QKVNormAttention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        # HybridNorm: norms[0] normalises x_m. HybridNorm*'s block 0: norms[0] before the attention, norms[1]
        # before the MLP, as Pre-LN's (so Pre-LN's weights load into it, the QKV norms aside).
        self.norms = nn.ModuleList(norm_layer(cfg) for _ in range(2 if self.pre else 1))
        self.drop = Dropout(cfg.dropout)  # on each residual branch, as Pre-LN (the code's `residual_dropout`)

    def forward(self, x, key_mask=None):
        if self.pre:
            u = x + self.drop(self.attn(self.norms[0](x), key_mask))
            return u + self.drop(self.mlp(self.norms[1](u)))
        h = self.norms[0](x + self.drop(self.attn(x, key_mask)))  # N(x_m)
        return h + self.drop(self.mlp(h))


# ------------------------------------------------------------------------------------------------- ResiDual


class DualStreams(ModelHooks):
    """The state between blocks is the pair (x_a, x_d), both the embedding output before the first block
    (the official code's `res = x * enc_res_input_norm_scale`, scale 1.0 in every config it ships). The
    last block appends the output x_a + N_d(x_d), computed in its own forward with its own N_d.

    `leave` gives that output after the last block, and before it what the output would be at that point:
    x_a + N_d(x_d) with the last block's N_d (the probes' hidden state after each block). That read of N_d
    outside its block's forward happens only for `output_hidden_states`, which the sharded trainer never asks
    for; the logits and the loss read only what the last block computed."""

    def enter(self, model, x):
        return x, x

    def leave(self, model, state):
        if len(state) == 3:
            return state[2]
        x_a, x_d = state
        return x_a + model.blocks[-1].dual_norm(x_d)


class ResiDualDecoderBlock(DecoderBlock):
    """The decoder's ResiDual: the self-attention, the cross-attention and the MLP each read x_a and add to both
    streams, x_a <- N(x_a + F(x_a)), x_d <- x_d + F(x_a); the decoder's output is x_a + N_d(x_d).

    The official code's decoder layer (`TransformerDecoderLayerBase` with its `res` stream) does the same over
    its three sub-layers. The model's decoder passes one tensor from block to block (model/seq2seq.py), so the
    pair travels as the state between these blocks: block 0 splits the embedding output into (x, x), the last
    block joins them, owning N_d (`dual_norm`) as the encoder's last block does. Decoding with a cache works
    unchanged: both streams are per position, and the new positions' are computed from the cached keys and
    values of the earlier ones."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.first = layer == 0
        self.dual_norm = norm_layer(cfg) if layer == (cfg.n_decoder_layers or cfg.n_layers) - 1 else None

    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        x_a, x_d = (x, x) if self.first else x
        f = self.drop(self.sa(x_a, self_mask, cache))
        x_a, x_d = self.norms[0](x_a + f), x_d + f
        f = self.drop(self.ca(x_a, memory_kv, src_mask))
        x_a, x_d = self.norms[1](x_a + f), x_d + f
        f = self.drop(self.mlp(x_a))
        x_a, x_d = self.norms[2](x_a + f), x_d + f
        return (x_a, x_d) if self.dual_norm is None else x_a + self.dual_norm(x_d)


@register(
    "resi-dual",
    label="ResiDual",
    family="successor",
    colour="#7b4173",
    final_norm=False,  # the output's own N(x_d) is the last norm: nothing on top of x_a + N(x_d)
    dropout=True,
    decoder=ResiDualDecoderBlock,
    model_hooks=DualStreams(),
)
class ResiDual(ClassicBlock):
    """x_a <- Norm(x_a + F(x_a)); x_d <- x_d + F(x_a) per sub-layer F; output x_a + Norm(x_d) (Xie et al. 2023).

    Pre-Post-LN: every sub-layer F (attention, then MLP) reads the Post-LN stream x_a and adds its output
    to both streams, x_a with Post-LN's norm after the sum, x_d (the "dual" residual) with nothing, as
    Pre-LN's stream; both start as the embedding output. The model's output is x_a + N_d(x_d), N_d one more
    norm of the config's kind, with no norm on top of the sum (final_norm=False). F includes the branch
    Dropout, and the same dropped output goes to both streams.

    Where the parameters live: each block has Post-LN's modules under Post-LN's names (attn, mlp, norms), so
    Post-LN's weights load into it; the last block also owns N_d (`dual_norm`) and computes the output in its
    forward, so that every parameter is used inside a block's forward (FSDP shards per block).

    What the official code (microsoft/ResiDual) settles: docs/blocks.md#resi-dual.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2)
        self.dual_norm = norm_layer(cfg) if layer == cfg.n_layers - 1 else None

    def forward(self, state, key_mask=None):
        x_a, x_d = state[0], state[1]
        f = self.drop(self.attn(x_a, key_mask))
        x_a, x_d = self.norms[0](x_a + f), x_d + f
        f = self.drop(self.mlp(x_a))
        x_a, x_d = self.norms[1](x_a + f), x_d + f
        if self.dual_norm is None:
            return x_a, x_d
        return x_a, x_d, x_a + self.dual_norm(x_d)
