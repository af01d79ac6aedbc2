"""The registry is the one place a block's facts live: every spec is complete and agrees with its module,
and a block registered with nothing but `register(...)` is seen by every module that needs a block fact."""

import re

import pytest
import torch
import torch.nn as nn

from blocklab import BLOCKS, build_model
from blocklab.blocks import FAMILIES, HIDDEN_NORM_LAWS, REGISTRY, BlockSpec, Predictions, register, unregister
from blocklab.blocks.classic import PreLN, PreLNDecoderBlock
from blocklab.blocks.decoder import DecoderBlock
from blocklab.config import TASKS
from blocklab.layers import RMSNorm
from blocklab.probes import predictions
from blocklab.registry import block_recipe
from blocklab.reporting import claims, figures
from tests.helpers import small_cfg

NORMS = (RMSNorm, nn.LayerNorm)


def test_blocks_lists_the_public_registry_in_order():
    assert BLOCKS == tuple(b for b, s in REGISTRY.items() if s.family != "ablation")
    assert {"post-ln", "pre-ln", "parallel", "sas", "sas-p", "sas-p-nonorm"} <= set(BLOCKS)


@pytest.mark.parametrize("block", list(REGISTRY))
def test_every_spec_is_complete_and_consistent(block):
    spec = REGISTRY[block]
    assert issubclass(spec.cls, nn.Module) and spec.cls.name == block
    assert spec.label.strip() and spec.family in FAMILIES and spec.public == (block in BLOCKS)
    assert spec.colour.startswith("#") and len(spec.colour) == 7
    assert set(spec.tasks) <= set(TASKS) and {"clm", "mlm"} <= set(spec.tasks)
    assert ("translation" in spec.tasks) == (spec.decoder is not None)
    if spec.decoder is not None:
        assert issubclass(spec.decoder, DecoderBlock)
    p = spec.predictions
    assert p.hidden_norm is None or p.hidden_norm in predictions.LAWS
    assert (block in predictions.LAST_FFN_SLOPE) == (p.last_ffn_slope is not None)


def test_labels_and_colours_are_unique_and_every_law_is_implemented():
    for field in ("label", "colour"):
        values = [getattr(s, field).lower() for s in REGISTRY.values()]
        assert len(values) == len(set(values)), field
    assert set(predictions.LAWS) == set(HIDDEN_NORM_LAWS)


@pytest.mark.parametrize("block", list(REGISTRY))
def test_spec_facts_match_the_built_modules(block):
    """dropout, has_norms, beta_ff/beta_sa and the tasks are what the block's modules do."""
    spec = REGISTRY[block]
    model = build_model(small_cfg(block, n_layers=2, dropout=0.1 if spec.dropout else 0.0))
    second = model.blocks[1]  # sas-p-nonorm keeps a norm on the first block's input only
    assert any(isinstance(m, nn.Dropout) and m.p > 0 for m in second.modules()) == spec.dropout
    # QK-norm (op; the qk_norm option) normalises queries and keys, not the residual stream
    assert any(isinstance(m, NORMS) for n, m in second.named_modules() if "qk_norm" not in n) == spec.has_norms
    assert hasattr(second, "beta_ff") == (spec.beta_ff is not None)
    assert hasattr(second, "beta_sa") == (spec.beta_sa is not None)
    assert isinstance(model.final_norm, NORMS) == spec.final_norm
    for task in TASKS:
        if task in spec.tasks:
            small_cfg(block, task)
        else:
            with pytest.raises(ValueError, match=f"block='{block}' is not offered for task='{task}'"):
                small_cfg(block, task)


@pytest.mark.parametrize(
    "facts, words",
    [
        (dict(family="exotic"), ["family='exotic'", "classic", "simplified", "ablation"]),
        (dict(colour="red"), ["colour='red'", "#rrggbb"]),
        (dict(label=""), ["label=''"]),
        (dict(tasks=("clm", "speech")), ["tasks='speech'", "clm, mlm, translation"]),
        (dict(tasks=("clm", "translation")), ["translation", "decoder"]),
        (dict(decoder=PreLNDecoderBlock, tasks=("clm",)), ["translation", "decoder"]),
        (dict(dropout="yes"), ["dropout='yes'", "True, False"]),
        (dict(beta_ff="0.1"), ["beta_ff='0.1'"]),
        (dict(predictions={"hidden_norm": "residual"}), ["predictions=", "Predictions"]),
    ],
)
def test_spec_validation_names_field_value_and_choices(facts, words):
    base = dict(label="Toy", family="classic", colour="#123456")
    with pytest.raises(ValueError) as e:
        BlockSpec(PreLN, **{**base, **facts})
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(
    "facts, words",
    [
        (dict(recipe=(("weight_decay", 0.0),), recipe_source="x"), ["'weight_decay'", "section.option", "model, data"]),
        (dict(recipe=(("optim.wd", 0.0),), recipe_source="x"), ["'optim.wd'", "train"]),
        (dict(recipe=(("train.lr", 1e-3),), recipe_source="x"), ["'train.lr'", "tuned"]),
        (dict(recipe=(("model.block", "pre-ln"),), recipe_source="x"), ["'model.block'"]),
        (dict(recipe=(("train.weight_decay", 0.0),)), ["recipe_source"]),
        (dict(recipe=(("train.weight_decay", 0.0),), recipe_source=" "), ["recipe_source=' '"]),
        (dict(recipe_source="Sec. 1"), ["recipe_source='Sec. 1'"]),
        (dict(recipe=(("train.weight_decay", 0.0), ("train.weight_decay", 0.1)), recipe_source="x"), ["twice"]),
        (dict(recipe=(("train.weight_decay", None),), recipe_source="x"), ["train.weight_decay=None"]),
        (dict(recipe=(("train.weight_decay", float("nan")),), recipe_source="x"), ["train.weight_decay=nan"]),
        (dict(recipe="train.weight_decay=0", recipe_source="x"), ["pairs"]),
    ],
)
def test_recipe_validation(facts, words):
    with pytest.raises(ValueError) as e:
        BlockSpec(PreLN, label="Toy", family="classic", colour="#123456", **facts)
    for w in words:
        assert w in str(e.value)


def test_block_recipe():
    assert block_recipe("ngpt") == {"train.weight_decay": 0.0, "train.warmup_steps": 0}
    assert REGISTRY["ngpt"].recipe_source == "Loshchilov et al. 2024, Sec. 2.6"
    assert block_recipe("pre-ln") == {} and REGISTRY["pre-ln"].recipe_source is None
    with pytest.raises(ValueError, match="block='nope' is not registered; choose one of: post-ln, pre-ln"):
        block_recipe("nope")
    spec = BlockSpec(
        PreLN,
        label="Toy",
        family="classic",
        colour="#123456",
        recipe={"train.warmup_steps": 0, "model.dyt_alpha": 0.8},
        recipe_source="Toy et al., Table 1",
    )
    assert spec.recipe == (("train.warmup_steps", 0), ("model.dyt_alpha", 0.8)) and hash(spec)


@pytest.mark.parametrize(
    "facts, word",
    [
        (dict(hidden_norm="quadratic", hidden_norm_source="x"), "hidden_norm='quadratic'"),
        (dict(hidden_norm="residual"), "hidden_norm_source"),
        (dict(last_ffn_slope=-0.5), "last_ffn_source"),
        (dict(hidden_norm="unit", hidden_norm_source="x", lemma2_paper=True), "lemma2_paper"),
    ],
)
def test_predictions_validation(facts, word):
    with pytest.raises(ValueError, match=word):
        Predictions(**facts)


def test_register_refuses_a_taken_name_label_or_colour():
    class Toy(PreLN):
        pass

    for name, facts, word in [
        ("pre-ln", dict(label="Toy", colour="#123456"), "already registered"),
        ("toy-block", dict(label="pre-ln", colour="#123456"), "label="),
        ("toy-block", dict(label="Toy", colour="#1F77B4"), "colour="),
        ("Toy Block", dict(label="Toy", colour="#123456"), "block name"),
    ]:
        with pytest.raises(ValueError, match=word):
            register(name, family="classic", **facts)(Toy)
    assert "toy-block" not in REGISTRY


@pytest.fixture
def toy_block():
    """A throwaway block: one class and one register(...), nothing else."""

    class Toy(PreLN):
        """Pre-LN under another name."""

    register(
        "toy-block",
        label="Toy block",
        family="simplified",
        colour="#123456",
        dropout=True,
        decoder=PreLNDecoderBlock,
        predictions=Predictions(
            hidden_norm="residual", hidden_norm_source="toy source", last_ffn_slope=-0.25, last_ffn_source="toy slope"
        ),
    )(Toy)
    try:
        yield "toy-block"
    finally:
        unregister("toy-block")
    assert "toy-block" not in REGISTRY


def test_a_registered_block_is_seen_everywhere(toy_block):
    # config validation: the block, the tasks its decoder offers, dropout, and the lists in the messages
    cfg = small_cfg(toy_block, "translation", dropout=0.1)
    # the lists in registry order, the toy block last (the built-in blocks' lists grow with every new block)
    translation = [b for b, s in REGISTRY.items() if "translation" in s.tasks]
    assert translation[:3] == ["post-ln", "pre-ln", "deepnorm"] and translation[-1] == toy_block
    with pytest.raises(ValueError, match=re.escape(f"choose one of: {', '.join(translation)}")):
        small_cfg("sas-p", "translation")
    dropout = [b for b, s in REGISTRY.items() if s.dropout]
    assert dropout[:4] == ["post-ln", "pre-ln", "parallel", "deepnorm"] and dropout[-1] == toy_block
    with pytest.raises(ValueError, match=re.escape(f"it applies to: {', '.join(dropout)}")):
        small_cfg("sas", dropout=0.1)
    with pytest.raises(ValueError, match="toy-block"):
        small_cfg("no-such-block")
    # the models: encoder blocks from spec.cls, decoder blocks from spec.decoder
    model = build_model(cfg)
    assert all(type(b).__name__ == "Toy" for b in model.blocks)
    assert all(isinstance(b, PreLNDecoderBlock) for b in model.decoder_blocks)
    ids = torch.randint(3, 97, (2, 7))
    assert model(ids, decoder_input_ids=ids, labels=ids).loss.isfinite()
    # the probes' predictions
    pred = predictions.hidden_norm_prediction(small_cfg(toy_block), 3)
    assert pred["source"] == "toy source" and "lemma2_paper" not in pred
    assert predictions.LAST_FFN_SLOPE[toy_block] == (-0.25, "toy slope")
    assert predictions.last_ffn_reference(toy_block, [2, 4], [1.0, 0.8])["slope"] == -0.25
    # the report: label, family and colour
    assert claims.name(toy_block) == "Toy block" and claims.simplified(toy_block)
    assert figures.block_colour(toy_block) == "#123456"


def test_the_parallel_block_is_classic_not_simplified():
    """GPT-J's parallel block keeps its skips and W^V, W^P: the report's per-step claim is not about it."""
    assert REGISTRY["parallel"].family == "classic" and not claims.simplified("parallel")
    assert all(claims.simplified(b) for b in ("sas", "sas-p", "sas-p-nonorm", "v-skipinit", "shaped-vp"))
    assert claims.name("no-such-block") == "no-such-block"
    assert figures.block_colour("no-such-block").startswith("#")
