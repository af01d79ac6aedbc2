"""DeepNorm (Wang et al. 2022, DeepNet: Scaling Transformers to 1,000 Layers, arXiv 2203.00555).

A Post-LN block whose skip is up-weighted by a constant alpha and whose value, output-projection and
MLP weights start Xavier-normal at gain beta (query and key at gain 1), whatever the config's `init`, so
that the model update of an early step stays bounded whatever the depth (the paper's Theorem 4.1):

    x <- LN(alpha x + F(x))            for F = self-attention, [cross-attention,] MLP

Constants (paper, Table 1; `N` encoder blocks, `M` decoder blocks):

    encoder-only or decoder-only:   alpha = (2N)^(1/4),              beta = (8N)^(-1/4)
    encoder-decoder, encoder:       alpha = 0.81 (N^4 M)^(1/16),      beta = 0.87 (N^4 M)^(-1/16)
    encoder-decoder, decoder:       alpha = (3M)^(1/4),              beta = (12M)^(-1/4)

Where the official code (torchscale) differs from the paper, which blocklab follows, and the other choices:
docs/blocks.md#deepnorm.
"""

from __future__ import annotations

from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.decoder import DecoderBlock
from blocklab.config import ModelConfig
from blocklab.layers import InitRule, Linear, WeightInit
from blocklab.registry import Predictions, register


def deepnorm_constants(cfg: ModelConfig, side: str = "encoder") -> tuple[float, float]:
    """(alpha, beta) of DeepNet Table 1 for the stack `side` ("encoder" or "decoder") of `cfg`."""
    N = cfg.n_layers
    if cfg.task != "translation":
        return (2 * N) ** 0.25, (8 * N) ** -0.25
    M = cfg.n_decoder_layers or cfg.n_layers
    if side == "decoder":
        return (3 * M) ** 0.25, (12 * M) ** -0.25
    return 0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)


def xavier_normal(beta: float, *linears: Linear) -> None:
    """Declare Linears to start Xavier-normal at gain `beta` (model.base.init_weights draws them so)."""
    for lin in linears:
        if not isinstance(lin, Linear):  # a plain nn.Linear declares nothing: init_weights would ignore beta
            raise TypeError(f"DeepNorm's init needs a blocklab.layers.Linear, got {type(lin).__name__}")
        lin.weight_init = WeightInit(InitRule.XAVIER_NORMAL, beta)


class DeepNormDecoderBlock(DecoderBlock):
    """u = LN(alpha x + SA(x)); v = LN(alpha u + CA(u, m)); y = LN(alpha v + MLP(v)) (DeepNet Fig. 2)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.alpha, beta = deepnorm_constants(cfg, "decoder")
        for attn in (self.self_attn, self.cross_attn):
            xavier_normal(1.0, attn.q, attn.k)
            xavier_normal(beta, attn.v, attn.proj)
        xavier_normal(beta, self.mlp.fc1, self.mlp.fc2)

    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        a = self.alpha
        u = self.norms[0](a * x + self.drop(self.sa(x, self_mask, cache)))
        v = self.norms[1](a * u + self.drop(self.ca(u, memory_kv, src_mask)))
        return self.norms[2](a * v + self.drop(self.mlp(v)))


@register(
    "deepnorm",
    label="DeepNorm",
    family="successor",
    colour="#17becf",
    final_norm=False,
    dropout=True,
    decoder=DeepNormDecoderBlock,
    predictions=Predictions(
        hidden_norm="unit",
        hidden_norm_source="unit-gain LN after each block: d",
        bounded_update_source="DeepNet Thm 4.1: the model update is O(1) in depth",
    ),
)
class DeepNorm(ClassicBlock):
    """x <- LN(alpha x + F(x)); Xavier-normal gain beta on W^V, W^P, W1, W2 (DeepNet eq. 6 and Table 1)."""

    def __init__(self, cfg, layer):
        super().__init__(cfg, layer, n_norms=2)
        self.alpha, beta = deepnorm_constants(cfg, "encoder")
        xavier_normal(1.0, self.attn.q, self.attn.k)
        xavier_normal(beta, self.attn.v, self.attn.proj, self.mlp.fc1, self.mlp.fc2)

    def forward(self, x, key_mask=None):
        u = self.norms[0](self.alpha * x + self.drop(self.attn(x, key_mask)))
        return self.norms[1](self.alpha * u + self.drop(self.mlp(u)))
