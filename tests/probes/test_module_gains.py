"""Gains that live in modules (nGPT's scalings, DyT's alpha) are logged; nGPT's predictions under either init."""

import torch

from blocklab import ModelConfig, build_model
from blocklab.probes.gains import gain_values
from blocklab.probes.predictions import hidden_norm_prediction


def cfg(block, **kw):
    return ModelConfig(block=block, vocab_size=200, d_model=64, n_layers=2, n_heads=4, d_ff=128, max_seq_len=16, **kw)


def test_ngpt_scalings_are_logged_as_used():
    model = build_model(cfg("ngpt"))
    g = gain_values(model)
    assert {f"L{l}.{k}" for l in (0, 1) for k in ("alpha_a", "alpha_m", "s_qk", "s_uv")} == set(g)
    assert abs(g["L0.alpha_a"] - 0.05) < 1e-6 and abs(g["L1.s_qk"] - 1.0) < 1e-6
    with torch.no_grad():
        model.blocks[1].alpha_m.s.fill_(-2 * 64**-0.5)  # alpha is used as |stored * 0.05 sqrt(d)|
    assert abs(gain_values(model)["L1.alpha_m"] - 0.1) < 1e-6


def test_each_dyt_alpha_is_logged():
    model = build_model(cfg("pre-ln", norm="dyt", dyt_alpha=0.7))
    with torch.no_grad():
        model.blocks[1].norms[1].a.fill_(0.25)
    g = gain_values(model)
    assert set(g) == {"L0.dyt_a0", "L0.dyt_a1", "L1.dyt_a0", "L1.dyt_a1"}
    assert abs(g["L1.dyt_a1"] - 0.25) < 1e-7 and abs(g["L0.dyt_a0"] - 0.7) < 1e-6


def test_ngpt_embedding_norm_is_predicted_under_both_inits():
    for init in ("normal", "xavier"):
        c = cfg("ngpt", init=init)
        model = build_model(c)
        x0 = model(torch.randint(0, 200, (8, 16)), output_hidden_states=True).hidden_states[0]
        measured = x0.pow(2).sum(-1).mean().item()
        pred = hidden_norm_prediction(c, 2)
        assert abs(pred["lower"][0] - measured) < 0.1 * measured, (init, pred["lower"][0], measured)
        assert pred["lower"][1:] == [1.0, 1.0]
