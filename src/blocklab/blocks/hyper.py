"""The blocks that widen the residual stream to n streams: Hyper-Connections (Zhu et al. 2025,
arXiv 2409.19606) and manifold-constrained Hyper-Connections (mHC; Xie et al., DeepSeek 2025, arXiv 2512.24880).

The state between blocks is the (B, T, n, d) streams H, n = `hc_streams`. `StreamHooks` (blocks/hooks.py)
makes it and reads it: `enter` copies the embedding output n times (HC Sec. 2.1, H^0 = [h^0, ..., h^0]),
`leave` sums the streams (HC Sec. 2.1: the last hyper hidden matrix is summed row-wise), which is the hidden
state the model's final norm N_f reads and `output_hidden_states` reports after each block. Each sub-layer k
(attention k = 2l, MLP k = 2l + 1 in block l) has its own connections around Pre-LN's sub-layer
F_k(h) = Dropout(Sub-layer(Norm(h))); the blocks keep Pre-LN's module names (attn, mlp, norms), so a Pre-LN
model's weights load into them.

Weight decay (model/params.py decays exactly the parameters of 2 or more dimensions): the static matrices
of HC and mHC's biases are stored flat, 1-D, so they get none (the HC paper: its static parts without weight
decay; biases without, as every bias here); the dynamic projections W (HC) and phi (mHC) are Linear weights and
are decayed, the scales s and gating factors a are scalars and are not.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import InitRule, Linear, WeightInit, gain, make_norm
from blocklab.registry import register

ZERO = WeightInit(InitRule.ZEROS)
S_INIT = 0.01  # HC: s_alpha, s_beta (Appendix J: `dynamic_alpha_scale = ones(1) * 0.01`)
GATE_INIT = 0.01  # mHC: the gating factors a_pre, a_post, a_res (Sec. 4.2 and its Table 5)
SINKHORN_ITERS = 20  # mHC: t_max of Sinkhorn-Knopp (Sec. 4.2)
# mHC: the eps DeepSeek's reference adds (TileKernels `torch/mhc.py`): to H_pre after its sigmoid (`mhc_pre_eps`)
# and to every entry and every sum of Sinkhorn-Knopp (`sinkhorn_normalize_ref`'s eps), 1e-6 in both.
PRE_EPS = 1e-6
SINKHORN_EPS = 1e-6
# mHC at init: the weight on HC's Pre-LN start (I, e_(k mod n)) against the uniform mixing, the most at which
# the 20 Sinkhorn-Knopp rounds still shrink an imbalance of H_res 100-fold (see `start_biases`).
START = 0.01 ** (1 / (2 * SINKHORN_ITERS))


class StreamHooks(ModelHooks):
    """The n streams as the state between blocks: n copies of the embedding output in, their sum out."""

    def enter(self, model, x):
        return x.unsqueeze(-2).expand(*x.shape[:-1], model.cfg.hc_streams, x.shape[-1])

    def leave(self, model, state):
        return state.sum(-2)


STREAMS = StreamHooks()


def full_precision(x: torch.Tensor):
    """Autocast off on x's device (meta has no autocast): the streams are mixed in their own dtype, fp32 under
    autocast, as Pre-LN's residual addition is; an autocast matmul would round them to bf16 at every sub-layer."""
    return nullcontext() if x.device.type == "meta" else torch.autocast(x.device.type, enabled=False)


def sublayers(block: ClassicBlock, key_mask):
    """Pre-LN's two sub-layers F_k(h) of `block`, the branch Dropout included (Appendix J: `dropout(h)`)."""
    return (
        lambda h: block.drop(block.attn(block.norms[0](h), key_mask)),
        lambda h: block.drop(block.mlp(block.norms[1](h))),
    )


class ConnectedBlock(ClassicBlock):
    """Pre-LN's two sub-layers, each inside a connection of its own that mixes the state around it: the one block
    of Hyper-Connections, mHC and Frac-Connections, which differ only in their connection (`connection`, made as
    `connection(cfg, k)` for sub-layer k = 2 layer + j, attention j = 0, MLP j = 1) and keep it under `slot`
    (`hc`, `frac`: the checkpoints' parameter names). A subclass's docstring is its block's equation."""

    connection: type[nn.Module]
    slot = "hc"

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2)
        setattr(self, self.slot, nn.ModuleList(self.connection(cfg, 2 * layer + j) for j in range(2)))

    def forward(self, state, key_mask=None):
        attn, mlp = sublayers(self, key_mask)
        around_attn, around_mlp = getattr(self, self.slot)
        return around_mlp(around_attn(state, attn), mlp)


# --------------------------------------------------------------------------------------- Hyper-Connections


class DynamicConnections(nn.Module):
    """The connections of HC (eqs. 10-13) and Frac-Connections (eqs. 11-14): a static matrix alpha (rows x cols)
    and vector beta (rows), plus, when dynamic (`hc_dynamic`), s_alpha tanh(Norm(H) W_alpha) and
    s_beta tanh(Norm(H) W_beta) per token, one row of each from each row of H (the streams or the fractions,
    `width` wide), W = 0 and s = 0.01 at init, one s_alpha shared by the whole alpha as the papers' pseudocode.
    Norm is the config's norm at `width` (the papers' pseudocode uses LayerNorm: `norm="layernorm"`)."""

    def __init__(self, cfg: ModelConfig, alpha: torch.Tensor, width: int):
        super().__init__()
        rows, cols = alpha.shape
        self.n = rows
        self.static_alpha = nn.Parameter(alpha.flatten())
        self.static_beta = nn.Parameter(torch.ones(rows))
        self.dynamic = cfg.hc_dynamic
        if self.dynamic:
            self.norm = make_norm(cfg.norm, width, cfg.norm_eps, cfg.dyt_alpha, cfg.derf_alpha)
            self.w_alpha = Linear(width, cols, bias=False, weight_init=ZERO)
            self.w_beta = Linear(width, 1, bias=False, weight_init=ZERO)
            self.s_alpha = gain(S_INIT)
            self.s_beta = gain(S_INIT)

    def connections(self, H):
        """alpha (rows x cols, or (..., rows, cols) per token when dynamic) and beta (rows, or (..., rows)) for H."""
        alpha = self.static_alpha.view(self.n, -1)  # row i: how row i of H feeds each output
        beta = self.static_beta
        if self.dynamic:
            h = self.norm(H)  # per row, so each row of alpha(H) and entry of beta(H) depends on that row alone
            alpha = alpha + self.s_alpha * torch.tanh(self.w_alpha(h))
            beta = beta + self.s_beta * torch.tanh(self.w_beta(h)).squeeze(-1)
        return alpha, beta


class HyperConnection(DynamicConnections):
    """H <- B^T F(A_m^T H) + A_r^T H around one sub-layer F (HC eq. 5), static or dynamic (eqs. 10-13).

    H is (..., n, d), one stream a row. The width connection [A_m | A_r] (n x (n + 1), HC eq. 7) is stored
    flat. At init (eq. 14) A_m = e_(k mod n), A_r = I, B = 1; dynamic: A(H) = A + s_alpha tanh(Norm(H) W_alpha),
    B(H) = B + s_beta tanh(Norm(H) W_beta)^T with W = 0 and s = 0.01, one s_alpha shared by A_m and A_r as
    the paper's Algorithm 2. Norm is the config's norm (Algorithm 2 uses LayerNorm: `norm="layernorm"`)."""

    def __init__(self, cfg: ModelConfig, k: int):
        n = cfg.hc_streams
        a_m = F.one_hot(torch.tensor(k % n), n).float()[:, None]
        super().__init__(cfg, torch.cat([a_m, torch.eye(n)], dim=1), cfg.d_model)

    def forward(self, H, sublayer):
        alpha, beta = self.connections(H)
        with full_precision(H):
            mix = alpha.transpose(-1, -2).to(H.dtype) @ H  # (..., 1 + n, d): the sub-layer's input A_m^T H, A_r^T H
        return beta.unsqueeze(-1) * sublayer(mix[..., 0, :]).unsqueeze(-2) + mix[..., 1:, :]


@register(
    "hyper-connections",
    label="Hyper-Connections",
    family="stream",
    colour="#e6550d",
    dropout=True,
    model_hooks=STREAMS,
)
class HyperConnections(ConnectedBlock):
    """H <- B^T F(Norm(A_m^T H)) + A_r^T H per sub-layer F, n streams, final norm on their sum (Zhu et al. 2025, eq. 5).

    Init (eq. 14) A_m = e_(k mod n), A_r = I, B = 1, so every stream holds Pre-LN's residual stream at init:
    A_m^T H reads one stream, all streams are equal (n copies of the embedding, then the same F_k added to
    each), so F_k sees Pre-LN's input and each stream becomes Pre-LN's x + F_k. The sum is n times Pre-LN's
    hidden state, and N_f(n x) = N_f(x) for RMSNorm and LayerNorm up to their epsilon (exactly: N_f with
    eps / n^2); with n = 1 the model is Pre-LN (eq. 15). `hc_dynamic=False`: the static HC of Sec. 2.1.

    Choices written down: the sub-layer index k counts attention and MLP separately (Algorithm 3 gives each its
    own HyperConnection); the dynamic Norm is the config's (Algorithm 2: LayerNorm); the output-layer std
    rescaling some reimplementations report is not applied (the equivalence above needs Pre-LN's weights).
    No recipe: the paper trains HC with its baselines' OLMo settings, nothing of its own.
    """

    connection = HyperConnection


# --------------------------------------------------------------------------------------------------- mHC


def sinkhorn_knopp(logits: torch.Tensor, iters: int = SINKHORN_ITERS, eps: float = SINKHORN_EPS) -> torch.Tensor:
    """exp(logits) (..., n, n) scaled alternately to unit row and column sums, `iters` times (mHC eq. 9).

    As DeepSeek's reference (TileKernels `sinkhorn_normalize_ref`): a row softmax, eps added to every entry,
    then columns, rows, columns ..., each sum with eps added, so that the last scaling is the columns': the
    columns sum to 1 - eps to rounding, the rows to Sinkhorn's residue after `iters` rounds."""
    m = logits.softmax(-1) + eps  # exp and the first row scaling; softmax subtracts the row max: no overflow
    m = m / (m.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        m = m / (m.sum(-1, keepdim=True) + eps)
        m = m / (m.sum(-2, keepdim=True) + eps)
    return m


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def start_biases(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """b_pre, b_res (n x n) that start mHC at H_pre = w e_(k mod n) + (1 - w) 1/n and H_res = w I + (1 - w) J/n,
    w = START: HC's Pre-LN start (A_m = e_(k mod n), A_r = I) mixed with the centre of the constraint set.

    H_pre sums to 1 and H_res is doubly stochastic already (a fixed point of Sinkhorn-Knopp). Neither can be
    HC's 0 / 1 (sigmoid and exp are never 0), and near I Sinkhorn-Knopp stops enforcing the constraint: it
    converges at the rate s_2(H_res)^2 per round (Knight 2008, SIAM J. Matrix Anal. Appl. 30), and s_2 of
    this H_res is w. w = 0.01^(1/40) = 0.891 is the most weight on I at which 20 rounds still shrink an
    imbalance 100-fold (n = 4: 0.918 on the diagonal, 0.027 off it). n = 1: H_res = [1] whatever b_res, and
    H_pre = w, which the sub-layer's norm removes (up to its eps)."""
    w = START
    if n == 1:
        return torch.full((1,), _logit(w)), torch.zeros(1, 1)
    home, other = w + (1 - w) / n, (1 - w) / n
    b_pre = torch.full((n,), _logit(other))
    b_pre[k % n] = _logit(home)
    return b_pre, math.log(home / other) * torch.eye(n)  # a row softmax of c I: e^c / (e^c + n - 1) = home


class ManifoldHyperConnection(nn.Module):
    """x_n <- sum_m H_res[m, n] x_m + H_post[n] F(sum_m H_pre[m] x_m) around one sub-layer F (mHC eqs. 3, 7-8).

    [H~_pre, H~_post, H~_res] = a * (RMSNorm(vec x) phi) + b, one gating factor a per mapping (a = 0.01 at
    init); H_pre = sigmoid(H~_pre) + eps, H_post = 2 sigmoid(H~_post), H_res = SinkhornKnopp(H~_res), all per
    token. x (..., n, d) is one stream a row; vec x its n d entries, stream after stream. The RMSNorm has no gain
    of its own (a gain is folded into phi); the mappings are computed in float32 at least (float64 for a float64
    model). H_res is applied as DeepSeek's reference applies it, x <- H_res^T x: each new stream a convex
    combination of the old ones. phi = 0 and the biases of `start_biases` start the connection as near Pre-LN as
    the constraint allows: the forward pass is Pre-LN's at init, to 1e-6, whatever the sub-layers' weights.

    What the reference (TileKernels `torch/mhc.py`) settles, and why the start is where it is: docs/blocks.md#mhc.
    """

    def __init__(self, cfg: ModelConfig, k: int):
        super().__init__()
        n, d = cfg.hc_streams, cfg.d_model
        self.n, self.eps = n, cfg.norm_eps
        self.phi = Linear(n * d, 2 * n + n * n, bias=False, weight_init=ZERO)  # [phi_pre | phi_post | phi_res]
        self.a_pre, self.a_post, self.a_res = (gain(GATE_INIT) for _ in range(3))
        b_pre, b_res = start_biases(n, k)
        self.b_pre = nn.Parameter(b_pre)
        self.b_post = nn.Parameter(torch.zeros(n))
        self.b_res = nn.Parameter(b_res.flatten())  # flat: a bias, so no weight decay

    def mappings(self, x):
        """H_pre (..., n), H_post (..., n), H_res (..., n, n) of the streams x (..., n, d); H_res[m, n] is old
        stream m's weight in new stream n (DeepSeek's `comb` layout)."""
        n, wide = self.n, torch.promote_types(x.dtype, torch.float32)  # at least float32
        with full_precision(x):
            flat = F.rms_norm(x.flatten(-2).to(wide), (n * x.shape[-1],), eps=self.eps)
            pre, post, res = self.phi(flat.to(self.phi.weight.dtype)).to(wide).split([n, n, n * n], -1)
        H_pre = torch.sigmoid(self.a_pre * pre + self.b_pre) + PRE_EPS
        H_post = 2 * torch.sigmoid(self.a_post * post + self.b_post)
        H_res = sinkhorn_knopp((self.a_res * res + self.b_res).unflatten(-1, (n, n)))
        return H_pre.to(x.dtype), H_post.to(x.dtype), H_res.to(x.dtype)

    def forward(self, x, sublayer):
        H_pre, H_post, H_res = self.mappings(x)
        with full_precision(x):
            h, kept = (
                (H_pre.unsqueeze(-2) @ x).squeeze(-2),
                H_res.transpose(-1, -2) @ x,
            )  # kept_n = sum_m H_res[m, n] x_m
        return kept + H_post.unsqueeze(-1) * sublayer(h).unsqueeze(-2)


@register("mhc", label="mHC", family="stream", colour="#a63603", dropout=True, model_hooks=STREAMS)
class MHC(ConnectedBlock):
    """x <- H_res^T x + H_post^T F(Norm(H_pre x)) per sub-layer F, H_res doubly stochastic (Xie et al. 2025, eqs. 3, 7-9).

    Always dynamic (`hc_dynamic` is HC's only). n streams as HC, output N_f(sum of the streams). The
    sub-layer index k counts attention and MLP separately, as HC's. H_res is applied as DeepSeek's reference
    applies it (ManifoldHyperConnection): each new stream a convex combination of the old ones. Not taken from
    the reference: its `mhc_head`, a learned sigmoid mix of the streams before the output head in place of
    their sum (the output stays HC's sum, as the README's block table has it for both blocks). No recipe: the paper trains mHC
    with its baselines' settings, nothing of its own.
    """

    connection = ManifoldHyperConnection
