"""block_table.py, the torch-free copy of the facts the command line reads, says what the block classes and
their registry specs say (this test imports torch: the table's whole point is that --help does not)."""

import pytest

from blocklab.block_table import BUILTIN_BLOCKS, describe_blocks, describe_recipes, gain_default, public_blocks
from blocklab.blocks import BLOCKS, REGISTRY
from blocklab.registry import PUBLIC_BLOCKS, block_names


def _typed(value):
    """A value with its type, so that 0 and 0.0 (which print differently in --help) are told apart."""
    return (type(value), value)


def test_the_table_lists_every_registered_block_in_registry_order():
    assert list(BUILTIN_BLOCKS) == list(REGISTRY)
    assert block_names() == tuple(REGISTRY)
    assert tuple(public_blocks()) == BLOCKS and tuple(PUBLIC_BLOCKS) == BLOCKS


@pytest.mark.parametrize("block", list(BUILTIN_BLOCKS))
def test_each_blocks_facts_equal_its_spec_and_class(block):
    facts, spec = BUILTIN_BLOCKS[block], REGISTRY[block]
    assert (facts.label, facts.public, facts.recipe_source) == (spec.label, spec.public, spec.recipe_source)
    assert _typed(facts.beta_ff) == _typed(spec.beta_ff) and _typed(facts.beta_sa) == _typed(spec.beta_sa)
    assert [(k, *_typed(v)) for k, v in facts.recipe] == [(k, *_typed(v)) for k, v in spec.recipe]
    assert facts.equation == spec.cls.__doc__.strip().splitlines()[0].rstrip(";")


def test_help_lines_come_from_the_table():
    # the public blocks only: softmax-noskip is an ablation, valid in a config but not offered
    assert [line.split()[0] for line in describe_blocks().splitlines()[1:]] == list(BLOCKS)
    assert describe_recipes() == (
        "  ngpt         --train.weight_decay 0.0, --train.warmup_steps 0  (Loshchilov et al. 2024, Sec. 2.6)\n"
        "  t-fixup      --train.warmup_steps 0  (Huang et al. 2020, abstract; official Train_IWSLT_TFixup_example.sh)"
    )
    assert (
        gain_default("beta_sa")
        == "the block's own (1.0 for sas-p, sas-p-nonorm; 0.2 for op; other blocks have no such gain)"
    )
