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
    fairseq's `attn_ln`, `--scale-attn`), a trainable scale gamma_h per head on the heads' outputs,
    HeadScaleMHA(Q, K, V) = Concat(gamma_1 h_1, ..., gamma_H h_H) W^O with gamma = 1 at init (`--scale-heads`),
    and a norm of width d_ff on the MLP's activation before W2 (`mlp.mid_norm`, fairseq's `ffn_layernorm`,
    `--scale-fc`). The norms are the config's kind (the paper's LayerNorm: `norm="layernorm"`), and a final norm
    follows the last block (fairseq's pre-norm decoder's `layer_norm`).

    What the official code settles, and where it differs from the paper:
    - Order inside the attention sub-layer: head scales, then the norm, then dropout, then the residual sum
      (fairseq `TransformerDecoderLayerBase.forward`: `c_attn`, `attn_ln`, `dropout_module`); inside the MLP:
      activation, its dropout, the norm, W2.
    - Where the head scales act. fairseq multiplies `c_attn` into the attention sub-layer's output after its
      out_proj, viewed as (heads, d_h): a scale per d_h-wide slice of W^O's output, not per head before W^O as
      the paper's equation writes it. `normformer_head_scale="heads"` (the default) is the paper's;
      `"output"` is the code's (`output_scale`). The two are the same function at init (every scale 1).
    - `--scale-resids` (a trainable d-vector on the MLP's residual, which the README suggests for small models)
      is not one of the three operations and is not built.
    No recipe: the paper trains NormFormer with its baselines' GPT-3 settings and a higher learning rate, which
    is the tuned setting here. With `canon`, the Canon layers sit as in Pre-LN.
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
    together for stability. What the official code settles (OLMo-core, `ReorderedNormTransformerBlock`:
    `h = x + attention_norm(attention(x))`, `h + feed_forward_norm(feed_forward(h))`, and the OLMo 2 configs'
    `qk_norm` with `use_head_qk_norm` off): the query and key norms are RMSNorms over the whole projections,
    d wide, before the head split (`q_norm(w_q(x))`), not per head; the branch dropout acts on the normalised
    output; a final norm follows the last block. The output norms are the config's kind (OLMo 2's RMSNorm, the
    package's default); the QK norms are RMSNorm whatever `norm` says, as `op`'s (they normalise queries and
    keys, not the stream). norm_eps is the config's (OLMo 2 uses 1e-6). Under attn_gate the gate reads x, what
    the query projection reads.

    No recipe, and not taken: the rest of OLMo 2's stability changes, which are training settings rather than
    the block (z-loss, no weight decay on the embeddings, AdamW's eps 1e-8; its N(0, 0.02) init is this
    package's `init="normal"` already).
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2, qk_norm_whole=True)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.norms[0](self.attn(x, key_mask)))
        return u + self.drop(self.norms[1](self.mlp(u)))
