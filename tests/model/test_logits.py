"""Which attentions QK-clip clips (model/logits.py): every registered block's, layer by layer, and the config's
answer (its blocks built on the meta device) the same as the built model's."""

import pytest

from blocklab import ModelConfig, build_model
from blocklab.attention import MultiHeadAttention, ShapedAttention
from blocklab.model.logits import layer_attentions, qk_clip_refusal, refusal
from blocklab.registry import REGISTRY

# The blocks whose attention normalises its queries and keys: scaling W^Q and W^K cannot lower their logits.
REFUSED = {"ngpt", "op", "hybridnorm", "olmo2"}


def cfg(block, task="clm", **kw):
    return ModelConfig(block=block, task=task, vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32, **kw)


@pytest.mark.parametrize("block", list(REGISTRY))
def test_every_block_has_its_attentions_found_and_the_config_answers_as_the_model(block):
    model = build_model(cfg(block))
    found = layer_attentions(model)
    assert {layer for layer, _ in found} == {"L0", "L1"}  # every block has an attention in every layer
    why = refusal(found)
    assert why == qk_clip_refusal(cfg(block))
    assert (why is not None) == (block in REFUSED), why
    if why is None:  # the softmax attentions of the harness, nothing else
        assert all(isinstance(m, (MultiHeadAttention, ShapedAttention)) for _, m in found)


@pytest.mark.parametrize("block", ["pre-ln", "sas-p"])
def test_qk_norm_is_refused_with_its_reason(block):
    why = qk_clip_refusal(cfg(block, qk_norm=True))
    assert "QK-norm" in why and why == refusal(layer_attentions(build_model(cfg(block, qk_norm=True))))


def test_a_translation_models_decoder_layers_have_two_attentions_each():
    model = build_model(cfg("pre-ln", "translation", n_decoder_layers=1))
    layers = [layer for layer, _ in layer_attentions(model)]
    assert layers == ["L0", "L1", "D0", "D0"]  # the decoder block's self- and cross-attention
    assert qk_clip_refusal(cfg("pre-ln", "translation", n_decoder_layers=1)) is None
