"""A Linear's initialisation is declared by its module (blocklab.layers.WeightInit) and init_weights draws
what each declaration says, for a module it has never seen as for the blocks' own."""

import inspect
import math

import pytest
import torch
import torch.nn as nn

from blocklab import build_model
from blocklab.blocks import register, unregister
from blocklab.blocks.classic import PreLN
from blocklab.blocks.deepnorm import xavier_normal
from blocklab.layers import (
    DEFAULT_INIT,
    Embedding,
    EmbeddingInit,
    InitRule,
    Linear,
    WeightInit,
    embedding_init_of,
    weight_init_of,
)
from blocklab.model import init_weights
from blocklab.model.base import TokenModel
from tests.helpers import small_cfg

D_IN, D_OUT = 256, 128


class Declared(nn.Module):
    """A module init_weights knows nothing about: one Linear per rule, and a plain nn.Linear."""

    def __init__(self):
        super().__init__()
        self.zero = Linear(D_IN, D_OUT, weight_init=WeightInit(InitRule.ZEROS))
        self.normal = Linear(D_IN, D_OUT, bias=False, weight_init=WeightInit(InitRule.XAVIER_NORMAL, 0.5))
        self.uniform = Linear(D_IN, D_OUT, weight_init=WeightInit(gain=3.0))
        self.plain = nn.Linear(D_IN, D_OUT)
        self.forced = Linear(D_IN, D_OUT, bias=False, weight_init=WeightInit(InitRule.XAVIER_UNIFORM, 0.5))
        self.emb = Embedding(D_IN, D_OUT, weight_init=EmbeddingInit(0.3))
        self.plain_emb = nn.Embedding(D_IN, D_OUT)


def xavier_std(gain: float) -> float:
    return gain * math.sqrt(2.0 / (D_IN + D_OUT))


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_init_weights_draws_each_declared_rule(init):
    torch.manual_seed(0)
    m = Declared()
    init_weights(m, small_cfg(init=init))
    assert not m.zero.weight.any() and not m.zero.bias.any()
    assert m.normal.weight.std().item() == pytest.approx(xavier_std(0.5), rel=0.03)  # whatever the init
    bound = xavier_std(0.5) * math.sqrt(3.0)  # Xavier-uniform at the declared gain, whatever the init
    assert bound * 0.98 < m.forced.weight.abs().max().item() <= bound
    assert m.emb.weight.std().item() == pytest.approx(0.3, rel=0.03)  # the declared std, whatever the init
    # a plain one as the config says: N(0, 1/d) under xavier, d the config's d_model
    want = 0.02 if init == "normal" else small_cfg().d_model ** -0.5
    assert m.plain_emb.weight.std().item() == pytest.approx(want, rel=0.03)
    assert not m.uniform.bias.any() and not m.plain.bias.any()
    if init == "normal":  # std 0.02, the declared gain unused
        for lin in (m.uniform, m.plain):
            assert lin.weight.std().item() == pytest.approx(0.02, rel=0.03)
    else:  # Xavier-uniform at the declared gain; a plain nn.Linear at gain 1
        for lin, gain in ((m.uniform, 3.0), (m.plain, 1.0)):
            bound = xavier_std(gain) * math.sqrt(3.0)
            assert bound * 0.98 < lin.weight.abs().max().item() <= bound


def test_a_plain_linear_gets_the_default_and_a_declared_one_its_own():
    assert weight_init_of(nn.Linear(2, 2)) is DEFAULT_INIT == WeightInit(InitRule.CONFIG, 1.0)
    spec = WeightInit(InitRule.ZEROS)
    assert weight_init_of(Linear(2, 2, weight_init=spec)) is spec


def test_init_weights_reads_no_attribute_by_name():
    assert "getattr" not in inspect.getsource(init_weights)


def test_building_a_linear_draws_what_an_nn_linear_draws():
    """Blocks build Linear where they built nn.Linear: the constructor consumes the random stream alike."""
    torch.manual_seed(3)
    a = Linear(5, 4, weight_init=WeightInit(InitRule.ZEROS))
    after_a = torch.rand(1)
    torch.manual_seed(3)
    b = nn.Linear(5, 4)
    torch.testing.assert_close(a.weight, b.weight, rtol=0, atol=0)
    torch.testing.assert_close(a.bias, b.bias, rtol=0, atol=0)
    assert torch.equal(after_a, torch.rand(1))


def test_an_embedding_declares_its_start_and_draws_what_an_nn_embedding_draws():
    assert embedding_init_of(nn.Embedding(2, 2)) is None and embedding_init_of(Embedding(2, 2)) is None
    spec = EmbeddingInit(0.1)
    assert embedding_init_of(Embedding(2, 2, weight_init=spec)) is spec
    torch.manual_seed(3)
    a = Embedding(5, 4, weight_init=spec)
    torch.manual_seed(3)
    torch.testing.assert_close(a.weight, nn.Embedding(5, 4).weight, rtol=0, atol=0)
    for bad in (0.0, -1.0, True, "0.1"):
        with pytest.raises(ValueError, match="EmbeddingInit std="):
            EmbeddingInit(bad)


def test_weight_init_takes_an_init_rule_only():
    with pytest.raises(ValueError, match="WeightInit rule='zeros' is not valid; give an InitRule"):
        WeightInit("zeros")


def test_deepnorm_refuses_a_linear_that_cannot_declare_its_init():
    with pytest.raises(TypeError, match="DeepNorm's init needs a blocklab.layers.Linear, got Linear"):
        xavier_normal(0.5, nn.Linear(2, 2))


@pytest.fixture
def zero_mlp_block():
    """A throwaway block that declares its MLP's output projection zero (the block is then the identity
    plus attention at init): only its own module says so."""

    class ZeroMLP(PreLN):
        def __init__(self, cfg, layer):
            super().__init__(cfg, layer)
            self.mlp.fc2.weight_init = WeightInit(InitRule.ZEROS)

    register("zero-mlp-toy", label="Zero-MLP toy", family="ablation", colour="#654321")(ZeroMLP)
    try:
        yield "zero-mlp-toy"
    finally:
        unregister("zero-mlp-toy")


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_a_new_blocks_declared_init_is_honoured_by_the_model(zero_mlp_block, init):
    model = build_model(small_cfg(zero_mlp_block, init=init))
    assert isinstance(model, TokenModel)
    for block in model.blocks:
        assert not block.mlp.fc2.weight.any()
        assert block.mlp.fc1.weight.std().item() > 0.01  # the rest as the config says
