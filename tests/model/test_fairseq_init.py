"""init="xavier" is fairseq's (Xiong et al.'s code), and `bias` adds fairseq's biases (issue 16, item 6).

fairseq's MultiheadAttention.reset_parameters: xavier_uniform_ on q/k/v at gain 1/sqrt(2), on out_proj at
gain 1, out_proj bias 0; its FFN Linear: xavier_uniform_, bias 0."""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.attention.modules import MultiHeadAttention

D = 256


def cfg(task="clm", block="post-ln", **kw):
    base = dict(
        block=block,
        task=task,
        vocab_size=300,
        d_model=D,
        n_layers=2,
        n_heads=4,
        d_ff=4 * D,
        max_seq_len=32,
        norm="layernorm",
        init="xavier",
    )
    return ModelConfig(**{**base, **kw})


def attentions(model):
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


@pytest.mark.parametrize("task", ["clm", "translation"])
def test_xavier_qkv_at_gain_one_over_sqrt2_others_at_gain_one(task):
    torch.manual_seed(0)
    model = build_model(cfg(task))
    attn = attentions(model)
    assert len(attn) == (2 if task == "clm" else 2 + 2 * 2)  # translation: encoder self, decoder self + cross
    for a in attn:
        for lin in (a.q, a.k, a.v):
            w = lin.weight
            bound = 2**-0.5 * math.sqrt(6 / (2 * D))
            assert w.abs().max() <= bound and w.abs().max() > 0.98 * bound  # xavier_uniform's bound
            assert w.std().item() == pytest.approx(math.sqrt(1 / (2 * D)), rel=0.02)
        w = a.proj.weight
        assert w.abs().max() <= math.sqrt(6 / (2 * D)) and w.abs().max() > 0.98 * math.sqrt(6 / (2 * D))
        assert w.std().item() == pytest.approx(math.sqrt(1 / D), rel=0.02)
    for m in model.modules():
        if hasattr(m, "fc1"):
            for lin in (m.fc1, m.fc2):
                fan_in, fan_out = lin.weight.shape[1], lin.weight.shape[0]
                bound = math.sqrt(6 / (fan_in + fan_out))
                assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.98 * bound
                assert lin.weight.std().item() == pytest.approx(math.sqrt(2 / (fan_in + fan_out)), rel=0.02)


def test_xavier_qkv_std_matches_torch_nn_multihead_attention():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D, 4)  # in_proj_weight (3d, d), xavier_uniform_ gain 1: std sqrt(1/(2d))
    ours = attentions(build_model(cfg()))[0]
    assert ours.q.weight.std().item() == pytest.approx(ref.in_proj_weight.std().item(), rel=0.03)


@pytest.mark.parametrize("task", ["clm", "mlm", "translation"])
def test_bias_true_adds_zero_biases_to_attention_and_mlp(task):
    model = build_model(cfg(task, bias=True))
    n = 0
    for a in attentions(model):
        for lin in (a.q, a.k, a.v, a.proj):
            assert lin.bias is not None and torch.all(lin.bias == 0)
            n += 1
    mlps = [m for m in model.modules() if hasattr(m, "fc1")]
    for m in mlps:
        assert m.fc1.bias is not None and m.fc2.bias is not None
        assert torch.all(m.fc1.bias == 0) and torch.all(m.fc2.bias == 0)
    assert n > 0 and mlps
    # the biases train: they get gradients
    ids = torch.randint(0, 300, (2, 8))
    if task == "translation":
        out = model(ids, ids, labels=ids)
    else:
        out = model(ids, labels=ids)
    out.loss.backward()
    assert attentions(model)[0].q.bias.grad is not None


@pytest.mark.parametrize("init", ["normal", "xavier"])
@pytest.mark.parametrize("task", ["clm", "translation"])
def test_bias_false_has_no_biases_and_the_same_weights_as_before(task, init):
    torch.manual_seed(0)
    model = build_model(cfg(task, init=init))
    for a in attentions(model):
        assert all(lin.bias is None for lin in (a.q, a.k, a.v, a.proj))
    for m in model.modules():
        if hasattr(m, "fc1"):
            assert m.fc1.bias is None and m.fc2.bias is None
    # bias=True adds exactly the biases: 4 d per attention, d_ff + d per MLP
    with_bias = build_model(cfg(task, init=init, bias=True))
    n_mlp = sum(1 for m in model.modules() if hasattr(m, "fc1"))
    extra = 4 * D * len(attentions(model)) + (4 * D + D) * n_mlp

    def count(m):
        return sum(p.numel() for p in m.parameters())

    assert count(with_bias) - count(model) == extra


def test_normal_init_unchanged_by_the_qkv_gain():
    torch.manual_seed(0)
    a = attentions(build_model(cfg(init="normal")))[0]
    assert a.q.weight.std().item() == pytest.approx(0.02, rel=0.02)


def test_shaped_attention_query_stays_zero():
    model = build_model(
        ModelConfig(
            block="sas",
            vocab_size=300,
            d_model=64,
            n_layers=2,
            n_heads=4,
            d_ff=128,
            max_seq_len=32,
            init="xavier",
            bias=True,
        )
    )
    for block in model.blocks:
        assert torch.all(block.attn.q.weight == 0)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_bias_validated(value):
    with pytest.raises(ValueError, match=r"bias=.* is not valid; choose one of: True, False"):
        ModelConfig(bias=value)
