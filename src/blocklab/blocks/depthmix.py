"""The residual-stream blocks (docs/blocks.md#the-residual-stream) whose sub-layers read a learned mix of every earlier
output instead of one running sum: Attention Residuals and DenseFormer.

The state between blocks (blocks/hooks.py `enter`/`leave`) is a tuple whose first entry stacks the earlier
outputs on a new leading axis, (n, B, T, d), and whose last entry is the (B, T, d) hidden state the next
block (or the final norm, and the probes after each block) reads. A stacked tensor rather than a list: the
blocks are compiled one by one, and a stack whose length grows with depth becomes one dynamic dimension
where a list would be a new graph for every length. Each mix is per token, so causality and padding are
those of the attention inside the sub-layers.

Memory: every mix keeps its (n, B, T, d) stack for the backward pass, O(L^2 B T d) in all for L sub-layers
(the straightforward form of the equations; the papers' in-place accumulators and two-phase computation
are speed and memory optimisations of the same function).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.blocks.classic import PreLN
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import MLP, POINTWISE_NORMS, Dropout, make_norm, norm_layer
from blocklab.registry import Predictions, register


def stack(sources: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The (n, B, T, d) sources with x (B, T, d) appended (n + 1 of them)."""
    return torch.cat([sources, x[None]])


# --------------------------------------------------------------------------------- Attention Residuals


class DepthAttention(nn.Module):
    """h = sum_i softmax_i(w^T RMSNorm(v_i)) v_i over the sources v_i (Kimi Team 2026, eqs. 2-4).

    One learned pseudo-query w (a d-vector, zero at init so the softmax is uniform: the mix starts as the
    mean of its sources) and one RMSNorm on the keys, which keeps a source of large magnitude from taking
    the softmax by its size alone (the paper's ablation "w/o RMSNorm"). The keys' norm is RMSNorm whatever
    the config's `norm` says, as in the paper, except under norm="dyt" or "derf", which replace every norm
    layer (docs/blocks.md#dyt, docs/blocks.md#derf). w is a vector, so it gets no weight decay, as the gains.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(cfg.d_model))
        key_norm = cfg.norm if cfg.norm in POINTWISE_NORMS else "rmsnorm"
        self.norm = make_norm(key_norm, cfg.d_model, cfg.norm_eps, cfg.dyt_alpha, cfg.derf_alpha)

    def weights(self, v: torch.Tensor) -> torch.Tensor:
        """softmax over the n sources of (n, B, T, d) v: (n, B, T), per token."""
        # Elementwise rather than a matmul, so that autocast leaves the fp32 stream in fp32.
        return (self.norm(v) * self.query).sum(-1).softmax(0)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return (self.weights(v).unsqueeze(-1) * v).sum(0)


class Sources(ModelHooks):
    """The stream of both blocks: (the sources stacked, (n, B, T, d); the next block's input, or the final
    hidden state). Before the first block the one source is the embedding, which is also the input."""

    def enter(self, model, x):
        return torch.stack([x]), x

    def leave(self, model, state):
        return state[-1]


SOURCES = Sources()


@register(
    "attn-res",
    label="AttnRes",
    family="stream",
    colour="#393b79",
    dropout=True,
    model_hooks=SOURCES,
)
class AttnRes(nn.Module):
    """h_k = sum_{i<k} softmax_i(w_k^T RMSNorm(v_i)) v_i; v_k = F_k(Norm(h_k)), v_0 the embedding (Kimi Team 2026, eqs. 2-6).

    Sub-layer k = 1..2L (block l's attention 2l + 1, its MLP 2l + 2) reads h_k, a softmax mix of its
    sources with its own pseudo-query w_k (DepthAttention), and adds v_k = F_k(Norm(h_k)). `attn_res_block` =
    S > 0 is Block AttnRes (eqs. 5-6): outputs are summed within blocks of S sub-layers, and the sources are the
    embedding b_0, the completed blocks' sums and the open block's partial sum (none on a block's first
    sub-layer). S = 0 (the default) is Full AttnRes, every output its own source, the same as S = 1. Sub-layer 1
    reads the embedding alone, and the final norm reads one more mix over every source.

    Block l owns the mixes that read its outputs, w_{2l+2} before its MLP and w_{2l+3} after it (the next
    block's input, or the final hidden state): every parameter is used inside its own block's forward (FSDP
    shards per block). At init every mix is the mean of its sources, so the model starts as Pre-LN up to the
    norms' epsilon (not under norm="dyt" or "derf", which are not scale-free).

    What the paper and the official pseudocode (MoonshotAI/Attention-Residuals) settle: docs/blocks.md#attn-res.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.norms = nn.ModuleList(norm_layer(cfg) for _ in range(2))
        self.mix_mlp = DepthAttention(cfg)  # w_{2l+2}: the MLP's input
        self.mix_out = DepthAttention(cfg)  # w_{2l+3}: the next block's input, or the final hidden state
        self.drop = Dropout(cfg.dropout)
        # Whether the attention (sub-layer k = 2l + 1) and the MLP (k + 1) start a block of S sub-layers. Flags,
        # not k: torch.compile guards on an int attribute's value, so the compiled blocks share their graphs
        # where they hold the same flags.
        S, k = cfg.attn_res_block or 1, 2 * layer + 1
        self.starts = ((k - 1) % S == 0, k % S == 0)

    @staticmethod
    def add(v: torch.Tensor, out: torch.Tensor, starts: bool) -> torch.Tensor:
        """The sources after a sub-layer's output: a new source where the sub-layer starts a block, else
        added to the last source, the open block's partial sum (eqs. 5-6). A completed block stays as it is."""
        return stack(v, out) if starts else stack(v[:-1], v[-1] + out)

    def forward(self, state, key_mask=None):
        v, h = state  # the sources so far (b_0 = the embedding first), this block's input h_{2l+1}
        attn_starts, mlp_starts = self.starts
        v = self.add(v, self.drop(self.attn(self.norms[0](h), key_mask)), attn_starts)
        v = self.add(v, self.drop(self.mlp(self.norms[1](self.mix_mlp(v)))), mlp_starts)
        return v, self.mix_out(v)


# ----------------------------------------------------------------------------------------- DenseFormer


class DepthWeightedAverage(nn.Module):
    """Y_i = sum_j alpha_ij X_j over the n sources a DWA reads, alpha_ii (the last) 1 and the others 0 at init."""

    def __init__(self, n: int):
        super().__init__()
        alpha = torch.zeros(n)
        alpha[-1] = 1.0  # alpha_ii: the DWA starts as the identity
        self.weight = nn.Parameter(alpha)  # `weight`, not `alpha`: the probes read a block's `alpha` as gains per head

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        return (self.weight[:, None, None, None] * xs).sum(0)


@register(
    "denseformer",
    label="DenseFormer",
    family="stream",
    colour="#8c6d31",
    dropout=True,
    model_hooks=SOURCES,  # X_0 .. X_i stacked, and Y_i
    predictions=Predictions(
        hidden_norm="residual",
        hidden_norm_source="DenseFormer is Pre-LN at init (alpha_ii = 1): Xiong et al. Lemma 2 (constants of this config)",
        lemma2_paper=True,
        last_ffn_slope=-0.5,
        last_ffn_source="DenseFormer is Pre-LN at init: Xiong et al. Thm 1 ~ 1/sqrt(L)",
    ),
)
class DenseFormer(PreLN):
    """X_i = B_i(Y_{i-1}); Y_i = sum_{j<=i} alpha_ij X_j, B_i Pre-LN, alpha_ii = 1 and the others 0 at init (Pagliardini et al. 2024, Sec. 3).

    Block i = 1..L is a Pre-LN block followed by its depth-weighted average (DWA) over X_0 (the embedding)
    .. X_i; at init every DWA is the identity, so the model is Pre-LN exactly (Sec. 3.1). The final norm
    reads Y_L.

    Dilation k and period p (Sec. 3.2, the "k x p-DenseFormer"; `denseformer_dilation`,
    `denseformer_period`), as the official code selects them (epfml/DenseFormer, `DWAModules`): block i
    has a DWA only when i % p == 0 (otherwise Y_i = X_i), and it reads X_j for j <= i with j = i (mod k),
    that is X_{i mod k}, X_{i mod k + k}, .., X_i: i // k + 1 weights, the last (X_i's) 1 at init. Every
    X_i is kept, whether or not its block mixes. The weights are a vector per block here, so, as every gain
    of blocklab, they get no weight decay (the code's nn.Linear(n, 1) weights are decayed with the matrices,
    at its default 1e-3), and the decay cannot pull alpha_ii away from the identity.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        i, k = layer + 1, cfg.denseformer_dilation
        self.k, self.first = k, i % k
        self.dwa = DepthWeightedAverage(i // k + 1) if i % cfg.denseformer_period == 0 else None

    def compile(self, *args, **kwargs):
        """The block compiled with its depth-weighted average left eager (training compiles block by block).
        Each block's DWA weight has its own length and the compiler holds a parameter's shape static, so a DWA
        inside the block's graph would make every block a graph of its own (and past the recompile limit, 8,
        the later blocks would run eager whole). Disabled here rather than by a decorator on the class: the
        decorator imports the compiler (3 s) wherever the blocks are imported."""
        if self.dwa is not None:
            self.dwa.forward = torch.compiler.disable(self.dwa.forward)
        super().compile(*args, **kwargs)

    def forward(self, state, key_mask=None):
        xs, y = state
        x = super().forward(y, key_mask)  # X_i = B_i(Y_{i-1}), B_i Pre-LN
        xs = stack(xs, x)
        if self.dwa is None:
            return xs, x  # Y_i = X_i: no DWA after this block
        return xs, self.dwa(xs[self.first :: self.k])  # over X_j, j <= i, j = i (mod k)
