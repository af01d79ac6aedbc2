"""nGPT, the normalised Transformer (Loshchilov et al. 2024, arXiv 2410.01131): every hidden state and every
weight vector along the model dimension lives on the unit sphere, and a block moves the hidden state
towards each sub-layer's (normalised) output by a learned per-dimension step (eqs. 10-11):

    h <- Norm(h + alpha_A (Norm(Attn(h)) - h));    h <- Norm(h + alpha_M (Norm(MLP(h)) - h))

Norm is L2 normalisation. Attention: q = s_qk Norm(q_h), k = s_qk Norm(k_h) per head, softmax scale
sqrt(d_h) (eq. 15-16). MLP: SwiGLU with u = s_u (W_u h), v = s_v sqrt(d) (W_v h) (eq. 20-21). The token
model adds a logit scale s_z per vocabulary entry and puts its matrices back on the sphere after every optimizer
step through the block's hooks (`SphereHooks` below, blocks/hooks.py). The scalings are stored as the authors'
code stores them (layers.Scale): alpha_A, alpha_M at 0.05, s_qk, s_u, s_v, s_z at 1, as used.

The official code read (NVIDIA/ngpt) and what it settled, blocklab's choices (no RoPE, the MLP's width) and the
recipe (no weight decay, no warm-up): docs/blocks.md#ngpt.
"""

from __future__ import annotations

import math

import torch.nn as nn
import torch.nn.functional as F

from blocklab.attention.functional import merge_heads, softmax_attention, split_heads
from blocklab.attention.logits import ClipsLogits
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import Scale, l2_normalise
from blocklab.registry import Predictions, register

ALPHA_INIT = 0.05  # alpha_A, alpha_M (the code's attn_alpha_init_value, mlp_alpha_init_value)


def _normalise_rows(*linears: nn.Linear, dim: int) -> None:
    for lin in linears:
        lin.weight.copy_(l2_normalise(lin.weight, dim))


class NormalisedAttention(ClipsLogits, nn.Module):
    """softmax(sqrt(d_h) q k^T) v with q = s_qk Norm(q_h), k = s_qk Norm(k_h) (nGPT eqs. 15-16)."""

    def qk_clip_refusal(self) -> str:
        return (
            "nGPT normalises each head's queries and keys onto the unit sphere, so scaling W^Q and W^K does not "
            "change its logits (s_qk bounds them)"
        )

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.s_qk = Scale(d, 1.0, d**-0.5)

    @property
    def impl(self) -> str:
        return "materialized" if self.cfg.attn_impl == "materialized" else "sdpa"

    def forward(self, h, key_mask=None):
        H, dh = self.cfg.n_heads, self.cfg.d_head
        s = split_heads(self.s_qk().expand(1, 1, -1), H)  # (1, H, 1, d_h)
        q = s * l2_normalise(split_heads(self.q(h), H))
        k = s * l2_normalise(split_heads(self.k(h), H))
        # softmax_attention divides by sqrt(d_h); nGPT's scale is sqrt(d_h): queries times d_h.
        out = softmax_attention(q * dh, k, split_heads(self.v(h), H), self.cfg.causal, key_mask, self.impl)
        return self.proj(merge_heads(out))

    def renormalise(self) -> None:
        _normalise_rows(self.q, self.k, self.v, dim=1)
        _normalise_rows(self.proj, dim=0)


class NormalisedMLP(nn.Module):
    """W_o (u * SiLU(v)), u = s_u W_u h, v = s_v sqrt(d) W_v h (nGPT eqs. 20-21); SiLU whatever `activation` says."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, f = cfg.d_model, cfg.d_ff
        self.fc1 = nn.Linear(d, 2 * f, bias=False)  # [W_u; W_v]: one matmul, as the code's c_fc
        self.fc2 = nn.Linear(f, d, bias=False)
        self.s_uv = Scale(2 * f, 1.0, 1.0)
        self.sqrt_d = math.sqrt(d)

    def forward(self, h):
        s_u, s_v = self.s_uv().chunk(2)
        u, v = self.fc1(h).chunk(2, -1)
        return self.fc2(s_u * u * F.silu(s_v * self.sqrt_d * v))

    def renormalise(self) -> None:
        _normalise_rows(self.fc1, dim=1)
        _normalise_rows(self.fc2, dim=0)


class SphereHooks(ModelHooks):
    """nGPT's side of the token model: logits = s_z * (h W^T), s_z stored at 1/sqrt(d) and used times
    sqrt(d) (its checkpoint name is `s_z.s`); after init and after every optimizer step the matrices go
    back on the unit sphere, the token embedding and an untied head by rows."""

    head_params = ("s_z",)

    def add_head(self, model, cfg) -> None:
        model.s_z = Scale(cfg.vocab_size, 1.0, cfg.d_model**-0.5)

    def head_weight(self, model, w):
        return w * model.s_z()[:, None]

    def after_update(self, model) -> None:
        for m in model.modules():
            if isinstance(m, (NormalisedAttention, NormalisedMLP)):
                m.renormalise()
        for w in model.token_matrices():
            w.copy_(F.normalize(w, dim=1))


@register(
    "ngpt",
    label="nGPT",
    family="successor",
    colour="#dbdb8d",
    final_norm=False,
    has_norms=False,
    options=(),
    sphere=True,
    model_hooks=SphereHooks(),
    recipe=(("train.weight_decay", 0.0), ("train.warmup_steps", 0)),
    recipe_source="Loshchilov et al. 2024, Sec. 2.6",
    predictions=Predictions(hidden_norm="sphere", hidden_norm_source="nGPT: every block ends with Norm, |h_l| = 1"),
)
class NGPT(nn.Module):
    """h <- Norm(h + alpha_A (Norm(Attn(h)) - h)); h <- Norm(h + alpha_M (Norm(MLP(h)) - h)) (nGPT eqs. 10-11)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        d = cfg.d_model
        self.attn = NormalisedAttention(cfg)
        self.mlp = NormalisedMLP(cfg)
        self.alpha_a = Scale(d, ALPHA_INIT, d**-0.5)
        self.alpha_m = Scale(d, ALPHA_INIT, d**-0.5)

    def muon_matrices(self) -> list[nn.Parameter]:
        """What train.optimizer muon gives Muon (model/params.py): the six matrices, W_q, W_k, W_v, W_o and the
        MLP's [W_u; W_v] and W_o, as any block's. They live on the unit sphere, and after Muon's step as after
        AdamW's the block's after_update hook puts them back there (SphereHooks, run by the trainer after every
        optimizer step): Muon's orthogonalised step moves a row like any other step, the projection undoes
        its change of length. The stored scalings alpha_A, alpha_M, s_qk and s_uv are vectors: AdamW's, whose
        per-coordinate step their stored scaling is sized for (the authors' Sec. 2.5)."""
        attn, mlp = self.attn, self.mlp
        return [attn.q.weight, attn.k.weight, attn.v.weight, attn.proj.weight, mlp.fc1.weight, mlp.fc2.weight]

    def forward(self, x, key_mask=None):
        h = l2_normalise(x)  # a no-op after the first block, whose input is token + position embedding
        h = l2_normalise(h + self.alpha_a().abs() * (l2_normalise(self.attn(h, key_mask)) - h))
        return l2_normalise(h + self.alpha_m().abs() * (l2_normalise(self.mlp(h)) - h))
