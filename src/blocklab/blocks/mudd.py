"""MUDDFormer (Xiao et al. 2025, "MUDDFormer: Breaking Residual Bottlenecks in Transformers via Multiway Dynamic
Dense Connections", ICML, arXiv 2502.12170; official code Caiyun-AI/MUDDFormer): after every block, the inputs of
the next one are dense, per-token weighted sums of every block output so far, one for each of its query, key,
value and residual streams.

The state between blocks (blocks/hooks.py `enter`/`leave`) is a pair: the block outputs so far stacked on a new
leading axis, (n, B, T, d) with X_0 the embedding, and the next block's C input streams, (C, B, T, d). As in
blocks/depthmix.py, a stacked tensor whose length grows with depth is one dynamic dimension for the compiler.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import InitRule, Linear, WeightInit, norm_layer
from blocklab.registry import register

WAYS = 4  # the query, key, value and residual streams ("qkvr")
LAST_EXPAND = 4  # the last block's DA hidden width, times its C n (the code's `expand_last`, `[1] * (L - 1) + [4]`)


class DynamicDense(nn.Module):
    """A_i = GELU(RMSNorm(X_i) W1) W2 + a_i, then X^s = sum_{j <= i} A_i[s, j] X_j for each stream s (MUDDFormer
    Sec. 2.2-2.3, eqs. 5-8): the dense weights of one block, made per token from its output X_i (`ways` rows of
    `n` weights, over the n = i + 1 outputs X_0 .. X_i), and the sums they weigh.

    As the official code settles it (JAX training code jax/MaxText/layers/llama2.py `LlamaDecoderLayer.setup`,
    the PyTorch port pytorch/muddformer/modeling_muddformer.py `MultiwayDynamicDenseBlock`): the RMSNorm has no
    gain (`RMSnormNoscale`, eps the config's `norm_eps`); the hidden width is C n (`dw_shape`'s size), four
    times that for the last block; W1 starts N(0, 1 / d) (`nd_dense_init(1.0, "fan_in", "normal")`), W2 at zero
    (`contant_dense_init(0.0)`) and the static a_i one-hot on the newest output X_i (`current_only`: `[0] * i +
    [1]`), so that at init every stream is X_i, the standard residual stream. a_i is a bias (1-D, no weight
    decay here); W1 and W2 are matrices and decayed."""

    def __init__(self, cfg: ModelConfig, n: int, ways: int, hidden: int):
        super().__init__()
        self.n, self.ways, self.eps = n, ways, cfg.norm_eps
        self.w1 = Linear(cfg.d_model, hidden, bias=False, weight_init=WeightInit(InitRule.FAN_IN_NORMAL))
        self.w2 = Linear(hidden, ways * n, bias=False, weight_init=WeightInit(InitRule.ZEROS))
        a = torch.zeros(ways, n)
        a[:, -1] = 1.0  # every stream the newest output X_i at init
        self.a = nn.Parameter(a.flatten())

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """A_i (..., ways, n) of the block output x (..., d)."""
        h = F.rms_norm(x, (x.shape[-1],), eps=self.eps)
        return (self.w2(F.gelu(self.w1(h))) + self.a).unflatten(-1, (self.ways, self.n))

    def forward(self, x: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
        """The streams (ways, B, T, d) from the block output x (B, T, d) and every output so far (n, B, T, d)."""
        return torch.einsum("btsn,nbtd->sbtd", self.weights(x), outputs)


class DenseStreams(ModelHooks):
    """The state (every block output so far, the next block's streams); before the first block both are the
    embedding alone, which block 0 reads as its query, key, value and residual input."""

    def enter(self, model, x):
        return x[None], x[None]

    def leave(self, model, state):
        return state[1][-1]  # the residual stream X^R (the last block's one stream: the output, eq. 8)


DENSE_STREAMS = DenseStreams()


@register(
    "muddformer",
    label="MUDDFormer",
    family="stream",
    colour="#756bb1",
    dropout=True,
    model_hooks=DENSE_STREAMS,
)
class MUDDFormer(ClassicBlock):
    """X_A = MHA(Norm(X^Q), Norm(X^K), Norm(X^V)) + X^R; X_i = X_A + MLP(Norm(X_A)); X^s = sum_j A_i[s, j] X_j (Xiao et al. 2025).

    Block i (from 1) reads its four input streams, the dense sums of the outputs X_0 .. X_{i-1} made after
    block i - 1, its attention taking queries, keys and values from the first three (each through a norm of
    its own) and adding its output to the fourth, X^R (eq. 7); then the MLP as Pre-LN's. Its DynamicDense makes
    the next block's streams from X_i; the last block makes one stream only, the model's output (eq. 8), which
    the final norm reads. The first block reads the embedding as all four streams, through one norm. At init
    every stream is the newest output, so the model is Pre-LN with the same weights.

    What the official code (Caiyun-AI/MUDDFormer) settles, and what of it is not taken: docs/blocks.md#muddformer.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2)  # norms[0]: the query stream's (block 0: every stream's)
        self.kv_norms = nn.ModuleList(norm_layer(cfg) for _ in range(2 if layer else 0))
        last = layer == cfg.n_layers - 1
        ways, n = (1 if last else WAYS), layer + 2  # the outputs X_0 .. X_{layer + 1}
        self.dense = DynamicDense(cfg, n, ways, ways * n * (LAST_EXPAND if last else 1))

    def compile(self, *args, **kwargs):
        """The block compiled with its DynamicDense left eager, as DenseFormer's average (blocks/depthmix.py):
        each block's dense weights have their own shapes, which would make every block a graph of its own."""
        self.dense.forward = torch.compiler.disable(self.dense.forward)
        super().compile(*args, **kwargs)

    def attention(self, streams: torch.Tensor, key_mask) -> torch.Tensor:
        """The attention over the query, key and value streams (the first three of `streams`; block 0: one)."""
        if len(self.kv_norms) == 0:
            return self.attn(self.norms[0](streams[0]), key_mask)
        kv = self.attn.keys_values(self.kv_norms[0](streams[1]), values=self.kv_norms[1](streams[2]))
        return self.attn(self.norms[0](streams[0]), key_mask, kv=kv)

    def forward(self, state, key_mask=None):
        outputs, streams = state
        h = streams[-1] + self.drop(self.attention(streams, key_mask))  # X_A = MHA(...) + X^R
        x = h + self.drop(self.mlp(self.norms[1](h)))
        outputs = torch.cat([outputs, x[None]])
        return outputs, self.dense(x, outputs)
