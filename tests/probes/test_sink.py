"""The attention-sink and gate probes (probes/sink.py): the first-token mass against the attention matrix written
out by hand, its uniform level, the gate's mean per head, and their place in stream_measures."""

import pytest
import torch

from blocklab import build_model
from blocklab.attention.functional import attention_matrix, split_heads
from blocklab.attention.modules import MultiHeadAttention
from blocklab.probes.sink import attention_measures, first_token_mass, uniform_first_token_mass
from blocklab.probes.stream import stream_measures
from tests.helpers import randomize, small_cfg


def captured_inputs(model, ids, mask=None):
    """[(attention module, its input x)] of one forward pass, in call order."""
    got = []
    hooks = [
        m.register_forward_pre_hook(lambda mod, args: got.append((mod, args[0])))
        for m in model.modules()
        if isinstance(m, MultiHeadAttention)
    ]
    model(ids, attention_mask=mask)
    for h in hooks:
        h.remove()
    return got


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_first_token_mass_is_the_mean_attention_on_key_0_over_queries_after_it(task):
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg("pre-ln", task, n_layers=2)), seed=1, scale=0.3).eval()
    ids = torch.randint(0, 97, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.long)
    if task == "mlm":
        mask[1, 6:] = 0
    got = captured_inputs(model, ids, mask if task == "mlm" else None)
    assert len(got) == 2
    for attn, x in got:
        q, k = split_heads(attn.q(x), 4), split_heads(attn.k(x), 4)
        A = attention_matrix(q, k, task == "clm", mask.bool() if task == "mlm" else None)
        keep = mask.clone().float()
        keep[:, 0] = 0  # queries at positions >= 1, real ones only
        want = [(A[:, h, :, 0] * keep).sum().item() / keep.sum().item() for h in range(4)]
        assert first_token_mass(attn, x, mask if task == "mlm" else None) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_zero_queries_attend_uniformly_and_read_the_uniform_level(task):
    """With W_Q = 0 every score is 0: each query spreads its attention evenly over the keys it may see, which is
    what `uniform` says (causal: 1 / (t + 1) at query t; bidirectional: 1 / real length)."""
    torch.manual_seed(0)
    model = build_model(small_cfg("pre-ln", task, n_layers=2)).eval()
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            torch.nn.init.zeros_(m.q.weight)
    ids = torch.randint(0, 97, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, 5:] = 0
    mask = mask if task == "mlm" else None
    out = attention_measures(captured_inputs(model, ids, mask), mask)
    level = uniform_first_token_mass(task == "clm", mask, 2, 8)
    assert out["uniform"] == pytest.approx(level)
    for heads in out["first_token_mass"]:
        assert heads == pytest.approx([level] * 4, abs=1e-6)
    if task == "clm":
        assert level == pytest.approx(sum(1 / (t + 1) for t in range(1, 8)) / 7)
    else:  # rows of 5 and 8 real tokens: 4 and 7 queries after the first
        assert level == pytest.approx((4 / 5 + 7 / 8) / 11)
    assert "gate_mean" not in out


def test_gate_mean_per_head_and_in_stream_measures():
    """A headwise gate with W_g = 0 and bias b_h reads sigmoid(b_h) for head h; stream_measures carries the
    attention measures of every layer, the gate's only where there is one."""
    torch.manual_seed(0)
    model = build_model(small_cfg("pre-ln", n_layers=2, attn_gate="headwise", bias=True)).eval()
    bias = torch.tensor([-2.0, -1.0, 0.0, 3.0])
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            torch.nn.init.zeros_(m.gate.weight)
            with torch.no_grad():
                m.gate.bias.copy_(bias)
    ids = torch.randint(0, 97, (2, 9))
    measures = stream_measures(model, ids)["attention"]
    assert measures["gate_mean"] == [pytest.approx(torch.sigmoid(bias).tolist())] * 2
    assert len(measures["first_token_mass"]) == 2 and all(len(h) == 4 for h in measures["first_token_mass"])
    plain = stream_measures(build_model(small_cfg("pre-ln", n_layers=2)).eval(), ids)["attention"]
    assert set(plain) == {"first_token_mass", "uniform"}
    assert "attention" not in stream_measures(build_model(small_cfg("sas", n_layers=2)).eval(), ids)
