"""T-Fixup (Huang et al. 2020, Improving Transformer Optimization Through Better Initialization, ICML 2020): no norm
layer anywhere, every sub-layer a plain residual branch, and an initialisation that keeps the output change of an
Adam update Theta(eta) whatever the depth, so that neither layer normalisation nor warm-up is needed:

    x <- x + F(x)            for F = self-attention, [cross-attention,] MLP

    1. Xavier-uniform for every weight matrix; token embeddings N(0, 1/d)
    2. decoder (M blocks): V and W^P of both attentions, W1, W2 times (9M)^(-1/4); the embeddings times (9N)^(-1/4)
    3. encoder (N blocks): V, W^P, W1, W2 times 0.67 N^(-1/4)

whatever the config's `init` says, the query and key at fairseq's Xavier gain 1/sqrt(2). A decoder-only model
(clm) takes the decoder's rule with M = n_layers, an encoder-only one (mlm, classification) the encoder's. Recipe:
no warm-up.

The paper, the official code read (layer6ai-labs/T-Fixup) and what it settled: docs/blocks.md#t-fixup.
"""

from __future__ import annotations

from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.decoder import DecoderBlock
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import EmbeddingInit, InitRule, Linear, WeightInit
from blocklab.registry import Predictions, register

QK_GAIN = 2**-0.5  # fairseq's Xavier gain on the query and key projections, which T-Fixup leaves


def tfixup_scale(cfg: ModelConfig, side: str) -> float:
    """The factor on the value, output-projection and MLP weights of the stack `side` ("encoder" or "decoder"):
    (9M)^(-1/4) for a decoder (M its depth), 0.67 N^(-1/4) for an encoder (N its depth)."""
    if side == "decoder":
        return (9 * (cfg.n_decoder_layers or cfg.n_layers)) ** -0.25
    return 0.67 * cfg.n_layers**-0.25


def embedding_scale(cfg: ModelConfig) -> float:
    """The factor on the token embedding: (9N)^(-1/4), N = n_layers (the encoder's depth for translation)."""
    return (9 * cfg.n_layers) ** -0.25


def xavier_uniform(gain: float, *linears: Linear) -> None:
    """Declare Linears to start Xavier-uniform at `gain` under either init (model.base.init_weights draws them)."""
    for lin in linears:
        if not isinstance(lin, Linear):  # a plain nn.Linear declares nothing: init_weights would ignore the gain
            raise TypeError(f"T-Fixup's init needs a blocklab.layers.Linear, got {type(lin).__name__}")
        lin.weight_init = WeightInit(InitRule.XAVIER_UNIFORM, gain)


def scale_attention(attn, scale: float) -> None:
    """Q, K at fairseq's gain; V and the output projection at gain 1 times T-Fixup's scale."""
    xavier_uniform(QK_GAIN, attn.q, attn.k)
    xavier_uniform(scale, attn.v, attn.proj)


class TFixupHooks(ModelHooks):
    """The token embedding T-Fixup asks of the model: N(0, 1/d) times (9N)^(-1/4), whatever the config's init."""

    def token_embedding_init(self, cfg) -> EmbeddingInit:
        return EmbeddingInit(std=cfg.d_model**-0.5 * embedding_scale(cfg))


class TFixupDecoderBlock(DecoderBlock):
    """u = x + SA(x); v = u + CA(u, m); y = v + MLP(v), no norm; V, W^P of both attentions and W1, W2 times (9M)^(-1/4)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=0)
        scale = tfixup_scale(cfg, "decoder")
        scale_attention(self.self_attn, scale)
        scale_attention(self.cross_attn, scale)
        xavier_uniform(scale, self.mlp.fc1, self.mlp.fc2)

    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        u = x + self.drop(self.sa(x, self_mask, cache))
        v = u + self.drop(self.ca(u, memory_kv, src_mask))
        return v + self.drop(self.mlp(v))


@register(
    "t-fixup",
    label="T-Fixup",
    family="successor",
    colour="#31a354",
    final_norm=False,
    has_norms=False,
    dropout=True,
    decoder=TFixupDecoderBlock,
    options=("qk_norm", "attn_gate"),  # no norm layer for norm="dyt" / "derf" to replace
    model_hooks=TFixupHooks(),
    predictions=Predictions(
        bounded_update_source="T-Fixup (Huang et al. 2020): its init keeps an Adam update's output change "
        "Theta(eta) in depth"
    ),
    recipe=(("train.warmup_steps", 0),),
    recipe_source="Huang et al. 2020, abstract; official Train_IWSLT_TFixup_example.sh",
)
class TFixup(ClassicBlock):
    """u = x + MHA(x); y = u + MLP(u), no norm; T-Fixup's scaled Xavier init on V, W^P, W1, W2 (Huang et al. 2020)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=0)
        # A decoder-only model (clm) takes the decoder's rule, an encoder (mlm, classification, translation's
        # encoder) the encoder's: the paper has none for a model of one stack.
        scale = tfixup_scale(cfg, "decoder" if cfg.causal else "encoder")
        scale_attention(self.attn, scale)
        xavier_uniform(scale, self.mlp.fc1, self.mlp.fc2)

    def forward(self, x, key_mask=None):
        u = x + self.drop(self.attn(x, key_mask))
        return u + self.drop(self.mlp(u))
