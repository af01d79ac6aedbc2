"""Two more answers to where the norms go around a sub-layer: NormFormer (Shleifer et al. 2021, arXiv 2110.09456;
official code facebookresearch/fairseq, `--scale-attn --scale-fc --scale-heads`, examples/normformer) adds three
operations to Pre-LN, and OLMo 2 (OLMo Team 2025, arXiv 2501.00656; official code allenai/OLMo-core) moves the
norm from each sub-layer's input to its output.

Both keep Pre-LN's module names (attn, mlp, norms), so a Pre-LN model's weights load into them; each adds its
own parts beside them.
"""

from __future__ import annotations

from blocklab.blocks.classic import ClassicBlock
from blocklab.config import ModelConfig
from blocklab.layers import gain, make_norm, norm_layer
from blocklab.registry import DEFAULT_OPTIONS, register


@register(
    "normformer",
    label="NormFormer",
    family="successor",
    colour="#9edae5",
    dropout=True,
    options=(*DEFAULT_OPTIONS, "canon"),
)
class NormFormer(ClassicBlock):
    """u = x + Norm(HeadScaleMHA(Norm(x))); y = u + W2 Norm(act(W1 Norm(u))) (Shleifer et al. 2021, Sec. 2).

    Pre-LN plus three operations: a norm on the attention's output before the residual sum (`post_attn_norm`,
    fairseq's `attn_ln`), a trainable scale gamma_h per head on the heads' outputs,
    HeadScaleMHA(Q, K, V) = Concat(gamma_1 h_1, ..., gamma_H h_H) W^O with gamma = 1 at init, and a norm of width
    d_ff on the MLP's activation before W2 (`mlp.mid_norm`, fairseq's `ffn_layernorm`). The norms are the
    config's kind; a final norm follows the last block. `normformer_head_scale="heads"` (the default) puts the
    scales on each head before W^O, as the paper's equation; "output" on the d_h-wide slices of W^O's output, as
    fairseq runs it (`output_scale`); the two are one function at init. With `canon`, the Canon layers sit as in
    Pre-LN.

    What fairseq's code settles, where it differs from the paper, and what is not built: docs/blocks.md#normformer.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        heads = cfg.normformer_head_scale == "heads"
        super().__init__(cfg, layer, n_norms=2, head_scale=heads)
        self.post_attn_norm = norm_layer(cfg)
        self.mlp.mid_norm = make_norm(cfg.norm, cfg.d_ff, cfg.norm_eps, cfg.dyt_alpha, cfg.derf_alpha)
        self.output_scale = None if heads else gain(1.0, cfg.n_heads)

    def forward(self, x, key_mask=None):
        a = self.attn(self.canon_a(self.norms[0](x), key_mask), key_mask)
        if self.output_scale is not None:  # fairseq's c_attn: on W^O's output, d_h-wide slices
            a = (a.unflatten(-1, (self.output_scale.shape[0], -1)) * self.output_scale.unsqueeze(-1)).flatten(-2)
        u = x + self.drop(self.post_attn_norm(a))
        return u + self.drop(self.mlp(self.canon_c(self.norms[1](u), key_mask), key_mask))


@register(
    "olmo2",
    label="OLMo 2",
    family="successor",
    colour="#3182bd",
    dropout=True,
    # Its queries and keys are always normalised, over the whole projections: qk_norm=True would add nothing.
    options=tuple(o for o in DEFAULT_OPTIONS if o != "qk_norm"),
)
class OLMo2(ClassicBlock):
    """u = x + Norm(MHA(x)); y = u + Norm(MLP(u)), RMSNorm over the whole query and key projections (OLMo Team 2025).

    The reordered norm: a norm on each sub-layer's output, none on its input, and QK-norm, which OLMo 2 takes
    together for stability. The query and key norms are RMSNorms over the whole projections, d wide, before the
    head split, whatever `norm` says; the branch dropout acts on the normalised output; a final norm follows the
    last block. Under attn_gate the gate reads x, what the query projection reads.

    What the official code (OLMo-core) settles, and what of OLMo 2 is not taken: docs/blocks.md#olmo2.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2, qk_norm_whole=True)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.norms[0](self.attn(x, key_mask)))
        return u + self.drop(self.norms[1](self.mlp(u)))
