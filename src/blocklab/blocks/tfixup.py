"""T-Fixup (Huang et al. 2020, Improving Transformer Optimization Through Better Initialization, ICML 2020, PMLR
119:4475-4483; official code layer6ai-labs/T-Fixup, built on fairseq).

No norm layer anywhere: every sub-layer is a plain residual branch, and the initialisation alone keeps the
output change of an Adam update Theta(eta) whatever the depth, so that neither layer normalisation nor
learning-rate warm-up is needed:

    x <- x + F(x)            for F = self-attention, [cross-attention,] MLP

The initialisation, the paper's three steps (`N` encoder blocks, `M` decoder blocks, `d` the model width):

    1. Xavier for every weight matrix; input embeddings N(0, d^-1/2) (std d^-1/2, fairseq's `normal_(0, d**-0.5)`)
    2. decoder: value and output projections of both attentions and both MLP matrices times (9M)^(-1/4);
       the input embeddings times (9N)^(-1/4)
    3. encoder: value and output projections and both MLP matrices times 0.67 N^(-1/4)

The paper writes N for both stacks (its models have equal depths); the official code scales each by its own
depth (`TransformerDecoderLayer.fixup_initialization`: `(9 * decoder_layers) ** (-1/4)`,
`TransformerEncoderLayer.fixup_initialization`: `0.67 * encoder_layers ** (-1/4)`), and so do SPEC 2c and
blocklab. For `clm` and `mlm` the paper gives no rule: a decoder-only model takes the decoder's, (9M)^(-1/4) with M =
n_layers (it has no cross-attention to scale), an encoder-only one (`mlm`, `classification`) the encoder's, 0.67
N^(-1/4) with N = n_layers; the embeddings (9 n_layers)^(-1/4) either way.

What the paper leaves open, settled by the official code (fairseq/modules/transformer_layer.py,
fairseq/models/transformer.py, fairseq/modules/multihead_attention.py, Train_IWSLT_TFixup_example.sh):
- Xavier is Xavier-uniform (fairseq's `xavier_uniform_`), and T-Fixup's own under either `init` of the config: the
  method is an initialisation, so every weight it names starts its way (as DeepNorm's do).
- The query and key projections stay at fairseq's Xavier gain 1/sqrt(2) (`MultiheadAttention.reset_parameters`;
  `fixup_initialization` leaves them): what `init="xavier"` draws (SPEC 3), here under either init.
- The value projection: fairseq's gain 1/sqrt(2) times the code's extra sqrt(2) (`param * (2**0.5)`), i.e. the
  paper's plain Xavier (gain 1), times the scale; in the decoder too, in both attentions (the code multiplies
  both `v_proj`s by sqrt(2); SPEC 2c's row names the extra sqrt(2) at the encoder only). The output projection
  and the MLP at gain 1 times the scale. Biases, where the config asks for them, start at zero (fairseq's Linear).
- The token embedding: N(0, 1/d) times (9N)^(-1/4), under either `init` (blocks/hooks.py, `token_embedding_init`).
  The factor at the input is the model's, as for every block: the paper's step 1 names none (its N(0, d^-1/2)
  rows have about unit norm); fairseq multiplies by `embed_scale` sqrt(d), which the official code keeps (no
  `--no-scale-embedding`), and which blocklab's `init="xavier"` (fairseq's, SPEC 3) applies. So init="xavier"
  is the official code (each coordinate of the first block's input has variance (9N)^(-1/2), plus the
  position's) and init="normal" the paper's rows as they are drawn. blocklab shares one matrix between the
  source, the target and the output head; the code with `--share-all-embeddings` scales that one matrix once,
  by the encoder's (9N)^(-1/4) (`TransformerEncoder.__init__`; `TransformerDecoder.__init__` skips it when all
  are shared), and so here. The tied output head is that scaled matrix (the code's `output_layer` reads
  `embed_tokens.weight`; its IWSLT script ties the decoder's input and output embeddings, both scaled by
  (9M)^(-1/4)).
- Position embeddings keep the config's init, unscaled: the code scales `embed_tokens` only (its IWSLT model has
  sinusoidal positions). An untied output head (`tie_embeddings=False`) starts as the config's init says, as for
  every block.
- No final norm (`--dont-use-layernorm` leaves the stacks' `layer_norm` None): `final_norm=False`.
- Dropout on each residual branch, after the attention and after the MLP's second matrix (fairseq's `dropout`).
- Options: `qk_norm` and `attn_gate` apply (softmax attention; the gate's W_g is not a weight of the paper and
  starts as the package's Linears do); `norm="dyt"` / `"derf"` are refused: there is no norm layer to replace.

Recipe: no warm-up (the paper's point; the code's `inverse_sqrt_nowarmup` schedule). Its other IWSLT settings (Adam
betas (0.9, 0.98), weight decay 1e-4, dropout, label smoothing 0.1) are the translation setup its baselines share,
not the method, and are left to the run.
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
