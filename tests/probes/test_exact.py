"""Probe quantities whose answer is known exactly."""

import math

import pytest
import torch
import torch.nn.functional as F

from blocklab import ModelConfig, build_model
from blocklab.probes import cosine_similarities, hidden_sq_norms, probe_batch
from blocklab.probes.predictions import (
    fit_loglog,
    hidden_norm_constants,
    hidden_norm_prediction,
    layernorm_jacobian_norm,
    lemma2_bounds,
    rmsnorm_jacobian_norm,
)

D = 32


def cfg(block, **kw):
    base = dict(block=block, vocab_size=64, d_model=D, n_layers=4, n_heads=4, d_ff=64, max_seq_len=16)
    base.update(kw)
    return ModelConfig(**base)


def batch(B=3, T=16, V=64):
    w = torch.randint(0, V, (B, T + 1))
    return w[:, :-1], w[:, 1:]


def spectral_norm(J):
    return torch.linalg.matrix_norm(J, ord=2).item()


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_lemma3_layernorm_jacobian_norm_matches_autograd(eps):
    torch.manual_seed(1)
    d = 12
    for scale, shift in ((1.0, 0.0), (0.05, 3.0), (7.0, -2.0)):
        x = torch.randn(d, dtype=torch.float64) * scale + shift
        J = torch.autograd.functional.jacobian(lambda v: F.layer_norm(v, (d,), eps=eps), x)
        assert spectral_norm(J) == pytest.approx(layernorm_jacobian_norm(x, eps).item(), rel=1e-9)
    # Lemma 3 is about the centred norm: a mean shift changes |x| but not the Jacobian norm.
    assert layernorm_jacobian_norm(x + 100.0).item() == pytest.approx(layernorm_jacobian_norm(x).item())
    assert spectral_norm(J) != pytest.approx(math.sqrt(d) / x.norm().item(), rel=1e-3)


def test_rmsnorm_jacobian_norm_matches_autograd():
    x = torch.randn(10, dtype=torch.float64) + 1.0
    J = torch.autograd.functional.jacobian(lambda v: F.rms_norm(v, (10,), eps=1e-5), x)
    assert spectral_norm(J) == pytest.approx(rmsnorm_jacobian_norm(x, 1e-5).item(), rel=1e-9)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_post_ln_block_outputs_have_squared_norm_d(norm, init):
    model = build_model(cfg("post-ln", norm=norm, init=init))
    r = probe_batch(model, *batch())
    assert len(r["hidden_sq_norm"]) == 5
    for n in r["hidden_sq_norm"][1:]:
        assert n == pytest.approx(D, rel=1e-4)  # d * var / (var + eps), var ~ 1 after the MLP skip
    pred = hidden_norm_prediction(model.cfg, 4)
    assert pred["lower"][1:] == pred["upper"][1:] == [D] * 4


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_shaped_attention_is_the_identity_at_init(task):
    """sas-p with beta_ff = 0: x_{l+1} = beta_SA RMSNorm(x_l), so the squared norms are
    beta_SA^2 |Norm(x_l)|^2 and the token cosine similarities pass through unchanged."""
    beta_sa = 0.7
    model = build_model(cfg("sas-p", task=task, beta_ff=0.0, beta_sa=beta_sa, init="xavier"))
    ids, labels = batch()
    r = probe_batch(model, ids, labels)
    with torch.no_grad():
        hs = model(ids, output_hidden_states=True).hidden_states
    for l in range(1, 5):
        expected = beta_sa**2 * model.blocks[l - 1].norm(hs[l - 1]).pow(2).sum(-1).mean().item()
        assert r["hidden_sq_norm"][l] == pytest.approx(expected, rel=1e-5)
        assert r["hidden_sq_norm"][l] == pytest.approx(beta_sa**2 * D, rel=1e-4)
    cos = r["cosine_similarity"]
    assert max(cos) - min(cos) < 1e-5
    assert max(abs(c) for c in cos) < 0.5  # random tokens: not trivially all 1
    pred = hidden_norm_prediction(model.cfg, 4)
    assert pred["lower"][1:] == pytest.approx([beta_sa**2 * D] * 4)


def brute_cosine(h, mask):
    out = []
    for b in range(h.shape[0]):
        x = h[b][mask[b].bool()]
        u = F.normalize(x, dim=-1)
        G = u @ u.T
        n = len(x)
        out.append((G.sum() - G.diagonal().sum()) / (n * (n - 1)))
    return torch.stack(out).mean().item()


def test_cosine_similarity_and_norms_against_brute_force_with_padding():
    h = torch.randn(3, 7, 5) + torch.tensor([1.0, 0, 0, 0, 0])
    mask = torch.ones(3, 7)
    mask[0, 4:] = 0
    mask[2, 2:] = 0
    h_pad = h.clone()
    h_pad[mask == 0] = 1e3  # pads must not count
    assert cosine_similarities([h_pad], mask)[0] == pytest.approx(brute_cosine(h, mask), rel=1e-5)
    assert cosine_similarities([h])[0] == pytest.approx(brute_cosine(h, torch.ones(3, 7)), rel=1e-5)
    same = torch.randn(1, 5).expand(2, 6, 5)
    assert cosine_similarities([same])[0] == pytest.approx(1.0, abs=1e-6)
    expected = (h.pow(2).sum(-1) * mask).sum() / mask.sum()
    assert hidden_sq_norms([h_pad], mask)[0] == pytest.approx(expected.item(), rel=1e-6)


def test_gradient_norms_match_parameters_and_are_cleared():
    model = build_model(cfg("pre-ln"))
    ids, labels = batch()
    r = probe_batch(model, ids, labels)
    assert set(r["grad_norm"]) == {"attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2"}
    model(ids, labels=labels).loss.backward()
    assert r["grad_norm"]["attn.k"][2] == pytest.approx(model.blocks[2].attn.k.weight.grad.norm().item(), rel=1e-5)
    assert r["last_ffn_grad_norm"] == pytest.approx(model.blocks[-1].mlp.fc2.weight.grad.norm().item(), rel=1e-5)
    assert r["last_ffn_grad_norm"] == r["grad_norm"]["mlp.fc2"][-1]
    model.zero_grad(set_to_none=True)
    probe_batch(model, ids, labels)
    assert all(p.grad is None for p in model.parameters())


def test_sas_roles_include_the_first_value_matrix_only_in_layer_0():
    r = probe_batch(build_model(cfg("sas")), *batch())
    v = r["grad_norm"]["attn.v"]
    assert v[0] > 0 and v[1:] == [None, None, None]


def test_lemma2_literal_and_constants():
    assert lemma2_bounds(0, 64) == (64, 64)
    assert lemma2_bounds(4, 64) == (3 * 64, 7 * 64)
    c = hidden_norm_constants(cfg("pre-ln", init="xavier", d_ff=D))
    assert c["ffn"] == pytest.approx(0.5) and c["attn"] == pytest.approx(1.0)
    assert hidden_norm_constants(cfg("pre-ln", init="xavier", d_ff=4 * D))["ffn"] == pytest.approx(0.32)
    pred = hidden_norm_prediction(cfg("pre-ln", init="xavier", d_ff=D), 6)
    for l in range(7):
        lo, hi = lemma2_bounds(l, D)
        assert pred["lemma2_paper"]["lower"][l] == lo and pred["lemma2_paper"]["upper"][l] == hi
        assert pred["lower"][l] == pytest.approx(lo + 1) and pred["upper"][l] == pytest.approx(hi + 1)  # + |pos|^2


def test_fit_loglog_recovers_a_power_law():
    xs = [2, 4, 8, 16, 32]
    slope, intercept = fit_loglog(xs, [3.0 * x**-0.5 for x in xs])
    assert slope == pytest.approx(-0.5) and math.exp(intercept) == pytest.approx(3.0)
    assert fit_loglog([4], [1.0]) == (None, None)
