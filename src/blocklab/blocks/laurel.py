"""LAuReL-LR, the low-rank Learned Augmented Residual Layer (Menghani et al. 2024, "LAuReL: Learned Augmented
Residual Layer", arXiv 2411.07501, ICML 2025): every residual connection gains a learned linear map of
rank r beside the identity,

    x_{i+1} = f(x_i) + B A x_i + x_i        (eq. 3; W = A B + I of Sec. 2.2),

so that a cheap linear path carries part of what the sub-layer f would otherwise have to learn. B starts
at zero, so the block is Pre-LN at initialisation.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab.blocks.classic import ClassicBlock
from blocklab.config import ModelConfig
from blocklab.registry import Predictions, register


class LowRank(nn.Module):
    """x -> B A x of rank r: A (r x d) projects down, B (d x r) back up; B = 0 at init.

    The paper writes W = A x B + I with A and B^T of shape D x r acting on row-vector activations (x A B), so
    its A is the first factor applied, the down projection, as LoRA's A (Sec. 3.3 calls the init "similar to
    the scheme used in Hu et al."); eq. 3's "B A x" names the same order. Its initialisation for the LLMs
    (Sec. 3.3, footnote 2): A column-orthogonal, A_{i,j} = 1/sqrt(r D) if i mod r = j and 0 otherwise
    (i < D, j < r), B zero ("B was always initialized to zero"); the ResNet used Xavier for A instead.
    `A` here is F.linear's (r, d) weight, the paper's A transposed. A gets no gradient at the first step
    (B = 0 stops it) and B gets A x's: the path opens from B.

    Both are plain Parameters, not Linears, so that init_weights (model/base.py), which redraws every Linear
    by the config's `init`, leaves this deterministic start alone; it draws no random numbers, so a seed
    gives the same Pre-LN weights as it does to `pre-ln`. Both are matrices: they get weight decay (the
    package's rule; the paper names a "regularization penalty" to tune with r, Sec. 3.3, and no exception).
    """

    def __init__(self, d: int, r: int):
        super().__init__()
        i = torch.arange(d)
        a = torch.zeros(r, d)
        a[i % r, i] = (r * d) ** -0.5
        self.A = nn.Parameter(a)
        self.B = nn.Parameter(torch.zeros(d, r))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.A), self.B)


@register(
    "laurel",
    label="LAuReL-LR",
    family="stream",
    colour="#e7969c",
    dropout=True,
    predictions=Predictions(
        hidden_norm="residual",
        hidden_norm_source="LAuReL-LR is Pre-LN at init (B = 0): Xiong et al. Lemma 2",
        lemma2_paper=True,
        last_ffn_slope=-0.5,
        last_ffn_source="LAuReL-LR is Pre-LN at init (B = 0): Xiong et al. Thm 1 ~ 1/sqrt(L)",
    ),
)
class Laurel(ClassicBlock):
    """u = x + MHA(Norm(x)) + B_1 A_1 x; y = u + MLP(Norm(u)) + B_2 A_2 u (LAuReL-LR, Menghani et al. 2024, eq. 3).

    One low-rank pair per sub-layer (docs/blocks.md#laurel: F the pre-normed sub-layer, attention and MLP each), of rank
    r = `laurel_rank` (default 32, within the best r in {16, 32} of the paper's rank sweep, Sec. 3.3; its
    LLMs use 4 and 64), 2 r d parameters each (Sec. 2.2). The paper lets f be any sub-layer or group of them
    (Fig. 2) and does not say which residual connections of its LLMs carry LAuReL. The low-rank path reads
    the residual stream itself, not the normed input, and carries no dropout: it is part of the skip. No
    recipe: the paper states no training setting of its own for LAuReL.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2)
        self.low_rank = nn.ModuleList(LowRank(cfg.d_model, cfg.laurel_rank) for _ in range(2))

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.attn(self.norms[0](x), key_mask)) + self.low_rank[0](x)
        return u + self.drop(self.mlp(self.norms[1](u))) + self.low_rank[1](u)
