"""gain_values: flat stable keys and the exact values of every gain; plot_gains writes a figure."""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.probes import gain_values, plot_gains
from blocklab.probes.gains import parse_key


def cfg(block, n_layers=2, **kw):
    return ModelConfig(
        block=block, vocab_size=50, d_model=16, n_layers=n_layers, n_heads=2, d_ff=32, max_seq_len=8, **kw
    )


@torch.no_grad()
def set_by_hand(model):
    """Every gain gets a distinct value: 100 * layer + 10 * kind + head."""
    for i, block in enumerate(model.blocks):
        for k, name in enumerate(("alpha", "beta", "gamma")):
            g = getattr(block.attn, name, None)
            if g is not None:
                g.copy_(100 * i + 10 * k + torch.arange(g.numel(), dtype=g.dtype))
        for k, name in enumerate(("beta_ff", "beta_sa"), start=3):
            if hasattr(block, name):
                getattr(block, name).fill_(100 * i + 10 * k)


def test_sas_p_keys_and_values_set_by_hand():
    model = build_model(cfg("sas-p"))
    set_by_hand(model)
    g = gain_values(model)
    expected = {}
    for i in range(2):
        for k, name in enumerate(("alpha", "beta", "gamma")):
            for h in range(2):
                expected[f"L{i}.{name}.h{h}"] = 100 * i + 10 * k + h
        expected[f"L{i}.beta_ff"] = 100 * i + 30
        expected[f"L{i}.beta_sa"] = 100 * i + 40
    assert g == pytest.approx(expected)
    assert set(g) == set(expected)  # nothing else: no norm weights, no W^V = I + dW of the first block
    assert list(g)[:2] == ["L0.alpha.h0", "L0.alpha.h1"]  # ordered by layer, then kind, then head


def test_defaults_at_init():
    g = gain_values(build_model(cfg("sas", beta_ff=0.2)))
    assert g["L1.alpha.h1"] == 1.0 and g["L0.gamma.h0"] == 1.0
    assert g["L1.beta_ff"] == pytest.approx(0.2)
    assert "L0.beta_sa" not in g


def test_shaped_vp_ratios():
    model = build_model(cfg("shaped-vp", beta_v=0.3))
    g = gain_values(model)
    assert g["L1.beta_v_over_alpha_v"] == pytest.approx(0.3)
    with torch.no_grad():
        model.blocks[1].attn.value.alpha.fill_(2.0)
        model.blocks[1].attn.value.beta.fill_(0.5)
        model.blocks[0].attn.proj.alpha.fill_(-4.0)
        model.blocks[0].attn.proj.beta.fill_(1.0)
        model.blocks[0].attn.value.alpha.fill_(0.0)
    g = gain_values(model)
    assert g["L1.beta_v_over_alpha_v"] == pytest.approx(0.25)
    assert g["L1.alpha_v"] == 2.0 and g["L1.beta_v"] == 0.5
    assert g["L0.beta_p_over_alpha_p"] == pytest.approx(-0.25)
    assert g["L1.beta_p_over_alpha_p"] == pytest.approx(0.3)  # value and projection are not mixed up
    assert math.isnan(g["L0.beta_v_over_alpha_v"])  # alpha = 0: no ratio, no crash


def test_v_skipinit_has_no_gamma_and_classic_blocks_have_no_gains():
    g = gain_values(build_model(cfg("v-skipinit")))
    assert "L0.alpha.h0" in g and g["L0.beta.h1"] == 0.0
    assert not any(".gamma." in k for k in g)
    assert gain_values(build_model(cfg("pre-ln"))) == {}


def test_a_users_own_model_of_blocklab_blocks():
    """Public API only: the blocks may sit anywhere, as long as they are a ModuleList named `blocks`."""
    inner = build_model(cfg("sas-p", n_layers=3))

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Module()
            self.encoder.blocks = inner.blocks

    set_by_hand(inner)
    assert gain_values(Wrapper()) == gain_values(inner)
    assert gain_values(Wrapper())["L2.beta_sa"] == 240


def test_parse_key_round_trip():
    assert parse_key("L3.alpha.h1") == (3, "alpha", 1)
    assert parse_key("L12.beta_v_over_alpha_v") == (12, "beta_v_over_alpha_v", None)
    assert parse_key("loss") is None


@pytest.mark.slow
def test_plot_gains(tmp_path):
    model = build_model(cfg("shaped-vp"))
    records = []
    for step in range(0, 30, 10):
        with torch.no_grad():
            model.blocks[0].attn.value.beta.fill_(0.2 / (1 + step))
        records.append({"step": step, "loss": 3.0, **{f"gain/{k}": v for k, v in gain_values(model).items()}})
    path = plot_gains(records, tmp_path / "gains.png")
    assert path and (tmp_path / "gains.png").stat().st_size > 10_000
    assert plot_gains([{"step": 0, "loss": 1.0}], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_admin_omegas_are_logged_as_their_channel_means():
    """Admin's omega_k (a d-vector per sub-layer, blocks/admin.py) under L{l}.omega{k}: the mean over channels, so
    a trained omega whose channels differ still reads as one skip weight per sub-layer."""
    torch.manual_seed(0)
    model = build_model(cfg("admin", init="xavier"))
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            for k, omega in enumerate(block.omegas):
                omega.copy_(10 * i + k + torch.linspace(-1, 1, omega.numel()))  # mean 10 i + k
    g = gain_values(model)
    assert g == pytest.approx({f"L{i}.omega{k}": 10 * i + k for i in range(2) for k in range(2)}, abs=1e-6)
    assert parse_key("L1.omega0") == (1, "omega0", None)
