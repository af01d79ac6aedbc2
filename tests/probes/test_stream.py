"""The residual-stream probes (probes/stream.py): each measurement against the value its block has by
construction at init, and against a hand computation off init, with padding left out of every mean."""

import math

import pytest
import torch

from blocklab import build_model
from blocklab.probes.measure import hidden_sq_norms
from blocklab.probes.stream import gain_curves, stream_measures
from tests.helpers import randomize, small_cfg

IDS = torch.randint(0, 97, (3, 12), generator=torch.Generator().manual_seed(5))


def measure(block, seed=None, ids=IDS, mask=None, **kw):
    torch.manual_seed(0)
    model = build_model(small_cfg(block, **kw))
    if seed is not None:
        randomize(model, seed=seed, scale=0.2)
    return model, stream_measures(model, ids, mask)


def test_pre_ln_has_hidden_norms_and_the_attention_sink_only():
    model, m = measure("pre-ln", seed=1)
    assert set(m) == {"hidden_sq_norm", "attention"} and set(m["attention"]) == {"first_token_mass", "uniform"}
    out = model(IDS, output_hidden_states=True)
    assert m["hidden_sq_norm"] == pytest.approx(hidden_sq_norms(out.hidden_states))
    assert len(m["hidden_sq_norm"]) == 4


def test_hyper_connections_start_as_identity_mixing():
    _, m = measure("hyper-connections", hc_streams=4)
    mix = m["mixing"]
    assert len(mix["residual"]) == 6  # two sub-layers per block
    for k, (R, pre, post) in enumerate(zip(mix["residual"], mix["pre"], mix["post"])):
        assert torch.allclose(torch.tensor(R), torch.eye(4), atol=1e-6)  # A_r = I (HC eq. 14)
        assert pre == pytest.approx(torch.eye(4)[k % 4].tolist(), abs=1e-6)  # A_m = e_(k mod n)
        assert post == pytest.approx([1.0] * 4, abs=1e-6)
    assert mix["gain"]["composite_forward"] == pytest.approx([1.0] * 6, abs=1e-5)


def test_static_hc_composite_gain_is_the_product_of_its_residual_matrices():
    torch.manual_seed(0)
    model = build_model(small_cfg("hyper-connections", hc_streams=3, hc_dynamic=False))
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for hc in (c for b in model.blocks for c in b.hc):
            hc.static_alpha.add_(torch.randn(hc.static_alpha.shape, generator=g) * 0.5)
    m = stream_measures(model, IDS)
    P = torch.eye(3)
    for k, hc in enumerate(c for b in model.blocks for c in b.hc):
        A_r = hc.static_alpha.view(3, 4)[:, 1:]
        P = A_r.T @ P  # new stream j = sum_i A_r[i, j] H_i
        assert torch.allclose(torch.tensor(m["mixing"]["residual"][k]), A_r.T, atol=1e-6)
        assert m["mixing"]["gain"]["composite_forward"][k] == pytest.approx(P.sum(1).abs().max().item(), rel=1e-5)
        assert m["mixing"]["gain"]["composite_backward"][k] == pytest.approx(P.sum(0).abs().max().item(), rel=1e-5)
    assert max(m["mixing"]["gain"]["composite_forward"]) > 1.5  # the test's perturbation does move the gain


def test_gain_curves_average_per_token_gains_and_keep_the_largest():
    a = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[1.0, -3.0], [0.0, 1.0]])
    g = gain_curves([torch.stack([a, b]), torch.stack([b, a])])
    # token 0: a then b.a = [[2, -3], [0, 1]]; token 1: b then a.b = [[2, -6], [0, 1]]
    assert g["single_forward"] == [pytest.approx(2.0), pytest.approx(2.0)]  # max |row sum|: 2 and |1 - 3| = 2
    assert g["single_backward"][0] == pytest.approx((2 + 2) / 2)  # a: columns 2, 1; b: |-3 + 1| = 2
    assert g["composite_forward"][1] == pytest.approx((1 + 4) / 2)  # rows -1, 1 and -4, 1
    assert g["composite_forward_max"][1] == pytest.approx(4.0)
    assert g["composite_backward"][1] == pytest.approx((2 + 5) / 2)


@pytest.mark.parametrize("seed", [None, 3])
def test_mhc_residual_mappings_stay_doubly_stochastic_so_the_composite_gain_stays_one(seed):
    _, m = measure("mhc", seed=seed, hc_streams=4)
    for R in m["mixing"]["residual"]:
        R = torch.tensor(R)
        assert torch.allclose(R.sum(0), torch.ones(4), atol=1e-3)
        assert torch.allclose(R.sum(1), torch.ones(4), atol=1e-3)
    assert m["mixing"]["gain"]["composite_forward"] == pytest.approx([1.0] * 6, abs=1e-2)
    assert m["mixing"]["gain"]["composite_backward_max"] == pytest.approx([1.0] * 6, abs=1e-2)


def test_attn_res_weights_are_uniform_at_init_and_label_their_sources():
    _, m = measure("attn-res", n_layers=2)
    w = m["depth_weights"]
    assert w["rows"] == ["mlp 1 input", "attn 2 input", "mlp 2 input", "final norm"]
    assert w["cols"] == ["embedding", "attn 1", "mlp 1", "attn 2", "mlp 2"]
    for i, row in enumerate(w["weights"]):
        n = i + 2  # the embedding and every sub-layer output so far
        assert row[:n] == pytest.approx([1 / n] * n, abs=1e-6)
        assert row[n:] == [None] * (5 - n)


def test_attn_res_weights_move_off_init_and_block_attn_res_names_blocks():
    _, m = measure("attn-res", seed=4, n_layers=2)
    rows = [r for r in m["depth_weights"]["weights"]]
    assert any(abs(x - 1 / 3) > 0.01 for x in rows[1][:3])
    assert all(sum(x for x in r if x is not None) == pytest.approx(1.0, abs=1e-5) for r in rows)
    _, b = measure("attn-res", n_layers=4, attn_res_block=4)
    assert b["depth_weights"]["cols"][0] == "embedding" and b["depth_weights"]["cols"][1] == "block 1"


def test_denseformer_weights_are_the_identity_at_init_and_follow_the_dilation():
    _, m = measure("denseformer", n_layers=4)
    w = m["depth_weights"]
    assert w["rows"] == [f"block {i}" for i in range(1, 5)]
    for i, row in enumerate(w["weights"], start=1):
        assert row == [1.0 if j == i else (0.0 if j <= i else None) for j in range(5)]
    _, d = measure("denseformer", n_layers=4, denseformer_dilation=2, denseformer_period=2)
    assert d["depth_weights"]["rows"] == ["block 2", "block 4"]
    assert d["depth_weights"]["weights"][1] == [0.0, None, 0.0, None, 1.0]  # X_0, X_2, X_4


def test_value_residual_lambdas_fixed_and_learned():
    _, m = measure("value-residual")
    assert m["value_lambdas"] == [None, [0.5, 0.5], [0.5, 0.5]]
    model, _ = measure("value-residual", value_residual_learnable=True)
    with torch.no_grad():
        model.blocks[2].attn.lambda1.fill_(0.1)
    assert stream_measures(model, IDS)["value_lambdas"][2] == pytest.approx([0.1, 0.5])


def test_laurel_low_rank_path_is_zero_at_init_and_measured_against_the_identity():
    model, m = measure("laurel", laurel_rank=4)
    assert m["low_rank_ratio"] == [0.0] * 6
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for lr in (p for b in model.blocks for p in b.low_rank):
            lr.B.copy_(torch.randn(lr.B.shape, generator=g))
    seen = []
    hook = model.blocks[0].low_rank[0].register_forward_pre_hook(lambda mod, a: seen.append(a[0]))
    got = stream_measures(model, IDS)["low_rank_ratio"]
    hook.remove()
    x = seen[0].flatten(0, 1)
    want = model.blocks[0].low_rank[0](x).norm(dim=-1).mean() / x.norm(dim=-1).mean()
    assert got[0] == pytest.approx(want.item(), rel=1e-5)
    assert all(r > 0 for r in got)


@pytest.mark.parametrize("block", ["mhc", "hyper-connections", "attn-res", "laurel", "frac-connections", "muddformer"])
def test_padding_is_left_out_of_every_mean(block):
    """Right padding with a causal model: the real tokens' values do not see it, so measuring the padded batch
    with its mask gives the unpadded batch's numbers; without the mask they differ."""
    model, _ = measure(block, seed=6)
    ids = IDS.clone()
    ids[:, 8:] = 0
    mask = torch.ones_like(ids)
    mask[:, 8:] = 0
    padded, short, unmasked = (
        stream_measures(model, ids, mask),
        stream_measures(model, IDS[:, :8]),
        stream_measures(model, ids),
    )

    def flat(m):
        return [x for k in sorted(m) for x in _leaves(m[k])]

    assert flat(padded) == pytest.approx(flat(short), rel=1e-4, abs=1e-6)
    assert flat(unmasked) != pytest.approx(flat(short), rel=1e-4, abs=1e-6)


def _leaves(x):
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _leaves(x[k])]
    if isinstance(x, list):
        return [y for e in x for y in _leaves(e)]
    return [] if x is None or isinstance(x, str) else [float(x)] if math.isfinite(x) else []


def test_the_model_keeps_its_mode_and_no_hook_is_left():
    model, _ = measure("mhc")
    model.train()
    stream_measures(model, IDS)
    assert model.training
    assert all(not m._forward_pre_hooks for m in model.modules())
