"""Frac-Connections (Zhu et al. 2025, "Frac-Connections: Fractional Extension of Hyper-Connections", arXiv
2503.14125): Hyper-Connections with an expansion rate 1/m, the d-wide hidden state split into m fractions of
d / m that play the streams' part, so the state between blocks stays d wide.

No official code is published: this port follows the paper's own PyTorch pseudocode (Appendix A, Algorithms 2
and 3), whose start is Pre-LN, and not lucidrains' `hyper-connections`, whose start is not
(docs/blocks.md#frac-connections).
"""

from __future__ import annotations

import torch

from blocklab.blocks.hyper import ConnectedBlock, DynamicConnections, full_precision
from blocklab.config import ModelConfig
from blocklab.registry import register


class FracConnection(DynamicConnections):
    """H <- B^T F(Y^T H) + A^T H around one sub-layer F, H the state's m fractions (Frac-Connections eqs. 6-8).

    H = Reshape(h, (m, d / m)), one fraction a row. The frac-connection matrix's lower rows [Y | A] (m x 2m, eq.
    7) are stored flat and B (1 x m) as a vector. The sub-layer reads the m mixed fractions Y^T H side by side,
    Reshape(Y^T H, (d,)) (Algorithm 1, line 4), and its output's fraction j, scaled by beta_j, is added to
    fraction j of A^T H (line 5). Dynamic (eqs. 11-14): Y(H), A(H) = s_alpha tanh(Norm(H) [W_gamma | W_alpha]) +
    [Y | A] and B(H) = s_beta tanh(Norm(H) W_beta)^T + B, Norm over each fraction (d / m wide), one s_alpha for
    Y and A (Algorithm 2's `dynamic_alpha_fn` and `dynamic_alpha_scale`). Init (eq. 15): Y = A = I, B = 1, W = 0,
    s = 0.01."""

    def __init__(self, cfg: ModelConfig, k: int = 0):  # every sub-layer's connection starts alike, whatever k
        m = cfg.frac_fractions
        eye = torch.eye(m)
        super().__init__(cfg, torch.cat([eye, eye], dim=1), cfg.d_model // m)

    def forward(self, h, sublayer):
        m = self.n
        H = h.unflatten(-1, (m, -1))  # (..., m, d / m)
        alpha, beta = self.connections(H)
        with full_precision(H):
            mix = alpha.transpose(-1, -2).to(H.dtype) @ H  # (..., 2m, d / m): Y^T H, then A^T H
        y = sublayer(mix[..., :m, :].flatten(-2)).unflatten(-1, (m, -1))
        return (beta.unsqueeze(-1) * y + mix[..., m:, :]).flatten(-2)


@register("frac-connections", label="Frac-Connections", family="stream", colour="#fd8d3c", dropout=True)
class FracConnections(ConnectedBlock):
    """H <- B^T F(Norm(Y^T H)) + A^T H per sub-layer F, the d-wide state in m fractions (Zhu et al. 2025, eq. 8).

    m = `frac_fractions`; static or dynamic as Hyper-Connections (`hc_dynamic`). Each sub-layer
    F_k(h) = Dropout(Sub-layer(Norm(h))) is Pre-LN's, with its own connections; the state between blocks is the
    d-vector whose fractions H holds, and the final norm reads it. At init (eq. 15) every connection is the
    identity with B = 1, so the block is Pre-LN exactly; m = 1 is Hyper-Connections with one stream, Pre-LN too.

    The paper's pseudocode this follows, where the most used implementation differs, and the choices:
    docs/blocks.md#frac-connections.
    """

    connection = FracConnection
    slot = "frac"
