"""SPEC section 2c's two options: norm="derf" (Dynamic erf, g erf(a x + s) + b, in place of every norm layer) and
attn_gate (gated attention, W^O [SDPA(.) * sigmoid(x W_g)], elementwise or headwise): which blocks take them,
what they build and compute, their initial values, that the generic properties (causality, padding invariance,
sdpa = materialized, cached decoding) hold with them on, and a short run that learns."""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import BLOCKS, build_model
from blocklab.attention.modules import AttentionGate, MultiHeadAttention
from blocklab.blocks import REGISTRY
from blocklab.layers import Derf, RMSNorm
from blocklab.model import count_parameters
from blocklab.model.params import param_groups
from blocklab.probes.gains import gain_values
from blocklab.training.config import coerce
from tests.blocks.test_options import OWN_QK_NORM, norm_width
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_cached_decoding_matches, assert_causal, assert_padding_invariant, randomize, small_cfg

NORMS = (RMSNorm, nn.LayerNorm)
DERF_BLOCKS = tuple(b for b in BLOCKS if "derf" in REGISTRY[b].options)
GATE_BLOCKS = tuple(b for b in BLOCKS if "attn_gate" in REGISTRY[b].options)
TRANSLATION = tuple(b for b in DERF_BLOCKS if "translation" in REGISTRY[b].tasks)  # with norms to replace


def paths(model, kinds, skip_qk=True):
    return {n for n, m in model.named_modules() if isinstance(m, kinds) and not (skip_qk and "qk_norm" in n)}


# ------------------------------------------------------------------------------------- which blocks


def test_derf_applies_where_dyt_does_and_the_gate_wherever_there_is_softmax_attention():
    """norm="derf" replaces norm layers exactly as norm="dyt" does; attn_gate gates MultiHeadAttention, so a block
    takes it if and only if it is built from one (not shaped attention, not nGPT's normalised attention)."""
    for b in REGISTRY:
        spec = REGISTRY[b]
        assert ("derf" in spec.options) == ("dyt" in spec.options), b
        has_mha = any(isinstance(m, MultiHeadAttention) for m in build_model(small_cfg(b, n_layers=2)).modules())
        assert ("attn_gate" in spec.options) == has_mha, b
    assert {"pre-ln", "post-ln", "deepnorm", "rezero", "op", "value-residual"} <= set(GATE_BLOCKS)
    assert not {"sas", "sas-p", "sas-p-nonorm", "shaped-vp", "v-skipinit", "ngpt"} & set(GATE_BLOCKS)


@pytest.mark.parametrize(
    "block,kw,said",
    [
        ("rezero", dict(norm="derf"), "norm='derf'"),
        ("ngpt", dict(norm="derf"), "norm='derf'"),
        ("ngpt", dict(attn_gate=True), "attn_gate=True"),
        ("sas", dict(attn_gate=True), "attn_gate=True"),
        ("sas-p", dict(attn_gate="headwise"), "attn_gate='headwise'"),
        ("v-skipinit", dict(attn_gate=True), "attn_gate=True"),
    ],
)
def test_a_block_that_cannot_take_an_option_refuses_it_by_name(block, kw, said):
    with pytest.raises(ValueError, match=f"{said} does not apply to block '{block}'"):
        small_cfg(block, **kw)


@pytest.mark.parametrize("value", [0, -0.5, "big"])
def test_derf_alpha_must_be_positive(value):
    with pytest.raises(ValueError, match="derf_alpha"):
        small_cfg("pre-ln", norm="derf", derf_alpha=value)


@pytest.mark.parametrize("value", ["elementwise", 1, "true", None])
def test_attn_gate_takes_false_true_or_headwise_only(value):
    with pytest.raises(ValueError, match=r"attn_gate=.* choose one of: false, true, headwise"):
        small_cfg("pre-ln", attn_gate=value)


def test_attn_gate_on_the_command_line():
    assert coerce("model", "attn_gate", "headwise") == "headwise"
    assert coerce("model", "attn_gate", "true") is True and coerce("model", "attn_gate", "false") is False


# ------------------------------------------------------------------------------------------ norm="derf"


@pytest.mark.parametrize("block", DERF_BLOCKS)
def test_derf_replaces_every_norm(block):
    """No RMSNorm / LayerNorm is left (op's QK-norm aside), a Derf sits exactly where each norm was, and each
    starts at a = derf_alpha = 0.5, s = 0 (trainable scalars), g ones, b zeros."""
    normed = build_model(small_cfg(block, n_layers=2))
    derf = build_model(small_cfg(block, n_layers=2, norm="derf"))
    assert paths(derf, NORMS) == set()
    if block not in OWN_QK_NORM:
        assert paths(derf, NORMS, skip_qk=False) == set()
    assert paths(derf, Derf) == paths(normed, NORMS) and paths(derf, Derf)
    for name, m in derf.named_modules():
        if isinstance(m, Derf):
            assert m.a.shape == () and m.a.item() == 0.5 and m.a.requires_grad
            assert m.s.shape == () and m.s.item() == 0.0 and m.s.requires_grad
            assert m.weight.shape[0] == norm_width(name)
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and torch.equal(m.bias, torch.zeros_like(m.bias))


@pytest.mark.parametrize("block", ["pre-ln", "peri-ln", "sas-p-nonorm", "op", "attn-res"])
def test_derf_alpha_sets_a(block):
    model = build_model(small_cfg(block, norm="derf", derf_alpha=1.7, dyt_alpha=0.9))
    derfs = [m for m in model.modules() if isinstance(m, Derf)]
    assert derfs and all(m.a.item() == pytest.approx(1.7) for m in derfs)


@pytest.mark.parametrize("block", TRANSLATION)
def test_derf_in_the_encoder_decoder(block):
    normed = build_model(small_cfg(block, "translation", n_decoder_layers=2))
    derf = build_model(small_cfg(block, "translation", n_decoder_layers=2, norm="derf", derf_alpha=0.8))
    assert paths(derf, NORMS, skip_qk=False) == set()
    assert paths(derf, Derf) == paths(normed, NORMS) and any("decoder_blocks" in p for p in paths(derf, Derf))
    assert all(m.a.item() == pytest.approx(0.8) for m in derf.modules() if isinstance(m, Derf))


def test_derf_forward_is_weight_erf_ax_plus_s_plus_bias_by_hand():
    """Each element against math.erf, in float64: g_c erf(a x + s) + b_c, the shift inside the erf."""
    m = Derf(6, alpha=0.5).double()
    with torch.no_grad():
        m.a.fill_(1.3)
        m.s.fill_(-0.4)
        m.weight.copy_(torch.tensor([1.0, -2.0, 0.5, 3.0, 0.1, 1.5]))
        m.bias.copy_(torch.tensor([0.0, 0.3, -1.0, 0.2, 2.0, -0.7]))
    x = torch.randn(2, 3, 6, dtype=torch.float64) * 3
    want = torch.tensor(
        [
            [[g * math.erf(1.3 * v - 0.4) + b for v, g, b in zip(row, m.weight.tolist(), m.bias.tolist())] for row in t]
            for t in x.tolist()
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(m(x), want, atol=1e-12, rtol=1e-12)
    # not a norm: neither scale-invariant nor odd once s moves
    assert not torch.allclose(m(x), m(2 * x), atol=1e-3)
    assert not torch.allclose(m(-x) - m.bias, -(m(x) - m.bias), atol=1e-3)


def test_derf_at_init_is_erf_of_half_x():
    x = torch.randn(4, 32) * 2
    torch.testing.assert_close(Derf(32, 0.5)(x), torch.erf(0.5 * x))


def test_derf_is_what_the_block_computes():
    """A Pre-LN block with norm="derf": u = x + MHA(Derf(x)); y = u + MLP(Derf(u))."""
    model = randomize(build_model(small_cfg("pre-ln", norm="derf")), seed=1, scale=0.2)
    x = torch.randn(2, 10, 32) * 3
    b = model.blocks[1]
    d0, d1 = b.norms
    u = x + b.attn(d0.weight * torch.erf(d0.a * x + d0.s) + d0.bias)
    torch.testing.assert_close(b(x), u + b.mlp(d1.weight * torch.erf(d1.a * u + d1.s) + d1.bias))
    torch.testing.assert_close(
        model.final_norm(x),
        model.final_norm.weight * torch.erf(model.final_norm.a * x + model.final_norm.s) + model.final_norm.bias,
    )


def test_derf_parameters_count_and_get_no_weight_decay():
    """Each norm of width d: d (RMSNorm) -> 2d + 2 (Derf: g, b, a, s); a and s sit with the undecayed gains."""
    base = count_parameters(build_model(small_cfg("pre-ln")))
    model = build_model(small_cfg("pre-ln", norm="derf"))
    assert count_parameters(model) == base + (3 * 2 + 1) * (2 * 32 + 2 - 32)
    decayed, undecayed = (set(map(id, g["params"])) for g in param_groups(model, 0.1))
    for m in model.modules():
        if isinstance(m, Derf):
            assert {id(m.a), id(m.s), id(m.weight), id(m.bias)} <= undecayed


def test_each_derf_alpha_and_shift_is_logged():
    model = build_model(small_cfg("pre-ln", norm="derf", derf_alpha=0.7, n_layers=2))
    with torch.no_grad():
        model.blocks[1].norms[1].s.fill_(0.25)
    g = {k: v for k, v in gain_values(model).items() if "derf" in k}
    assert set(g) == {f"L{l}.derf_{p}{i}" for l in (0, 1) for p in "as" for i in (0, 1)}
    assert g["L0.derf_a0"] == pytest.approx(0.7) and g["L1.derf_s1"] == 0.25 and g["L1.derf_s0"] == 0.0


# ------------------------------------------------------------------------------------------- attn_gate


@pytest.mark.parametrize("gate,width", [(True, 32), ("headwise", 4)])
@pytest.mark.parametrize("block", GATE_BLOCKS)
def test_attn_gate_builds_one_gate_per_attention(block, gate, width):
    """W_g is a Linear of d x d (elementwise) or d x H (headwise) in every attention, and nothing else changes."""
    on = build_model(small_cfg(block, attn_gate=gate, n_layers=2))
    off = build_model(small_cfg(block, n_layers=2))
    attns = [m for m in on.modules() if isinstance(m, MultiHeadAttention)]
    gates = [m for m in on.modules() if isinstance(m, AttentionGate)]
    assert attns and [a.gate for a in attns] == gates
    for g in gates:
        assert isinstance(g, nn.Linear) and g.weight.shape == (width, 32) and g.bias is None
    assert count_parameters(on) == count_parameters(off) + len(gates) * width * 32
    assert not any(isinstance(m, AttentionGate) for m in off.modules())


def test_attn_gate_in_both_decoder_attentions_with_a_bias_where_the_projections_have_one():
    m = build_model(small_cfg("pre-ln", "translation", attn_gate=True, bias=True, n_decoder_layers=2))
    for b in m.decoder_blocks:
        assert isinstance(b.self_attn.gate, AttentionGate) and isinstance(b.cross_attn.gate, AttentionGate)
    gates = [g for g in m.modules() if isinstance(g, AttentionGate)]
    assert len(gates) == 3 + 2 * 2 and all(torch.equal(g.bias, torch.zeros(32)) for g in gates)


@pytest.mark.parametrize("init,std", [("normal", 0.02), ("xavier", math.sqrt(2 / (64 + 64)))])
def test_the_gate_starts_as_the_packages_linears(init, std):
    """init="normal": N(0, 0.02^2) (the official code's draw); "xavier": Xavier-uniform at gain 1."""
    model = build_model(small_cfg("pre-ln", attn_gate=True, init=init, d_model=64, n_layers=2))
    w = torch.cat([m.weight.flatten() for m in model.modules() if isinstance(m, AttentionGate)])
    assert w.std().item() == pytest.approx(std, rel=0.1) and abs(w.mean().item()) < 0.1 * std


def _gate_on_and_off(gate, **kw):
    """A randomised model without the gate, and one with it that holds the same other weights."""
    off = randomize(build_model(small_cfg("pre-ln", **kw)), seed=5, scale=0.3)
    on = build_model(small_cfg("pre-ln", attn_gate=gate, **kw))
    missing, unexpected = on.load_state_dict(off.state_dict(), strict=False)
    assert not unexpected and missing and all(".attn.gate." in k for k in missing)
    with torch.no_grad():
        for g in on.modules():
            if isinstance(g, AttentionGate):
                g.weight.normal_(0, 0.5)
    return off, on


@pytest.mark.parametrize("gate", [True, "headwise"])
def test_the_gate_changes_the_output_and_a_zero_gate_halves_the_attention(gate):
    off, on = _gate_on_and_off(gate)
    ids = torch.randint(0, 97, (2, 12))
    assert not torch.allclose(on(ids).logits, off(ids).logits, atol=1e-3)
    x = torch.randn(2, 12, 32)
    with torch.no_grad():
        for g in on.modules():
            if isinstance(g, AttentionGate):
                g.weight.zero_()  # sigmoid(0) = 1/2 on every channel: W^O (A V / 2)
    torch.testing.assert_close(on.blocks[1].attn(x), 0.5 * off.blocks[1].attn(x))


@pytest.mark.parametrize("gate,shape", [(True, (2, 12, 4, 8)), ("headwise", (2, 12, 4, 1))])
def test_gate_values_lie_in_0_1_one_per_channel_or_one_per_head(gate, shape):
    """Hooked on the gate itself: the values the attention multiplies by, per query token."""
    _, on = _gate_on_and_off(gate)
    seen = []
    for g in on.modules():
        if isinstance(g, AttentionGate):
            g.register_forward_hook(lambda mod, inp, out: seen.append(out.detach()))
    on(torch.randint(0, 97, (2, 12)))
    assert len(seen) == 3
    for v in seen:
        assert v.shape == shape and bool(((v > 0) & (v < 1)).all())
        assert v.std() > 0.05  # input-dependent, not a constant


@pytest.mark.parametrize("gate", [True, "headwise"])
def test_gated_attention_is_the_formula(gate):
    """W^O [concat_h softmax(q_h k_h^T / sqrt(d_h)) v_h * sigmoid(x W_g)], written out in float64; headwise,
    the h-th gate column scales head h's whole output."""
    _, on = _gate_on_and_off(gate, bias=True)
    attn = on.double().blocks[0].attn
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.3)
    B, T, d, H, dh = 2, 9, 32, 4, 8
    x = torch.randn(B, T, d, dtype=torch.float64)

    def heads(lin):
        return lin(x).view(B, T, H, dh).transpose(1, 2)

    s = (heads(attn.q) @ heads(attn.k).transpose(-1, -2)) / math.sqrt(dh)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (s.softmax(-1) @ heads(attn.v)).transpose(1, 2)  # (B, T, H, dh)
    g = torch.sigmoid(x @ attn.gate.weight.t() + attn.gate.bias)
    y = y * (g.view(B, T, H, dh) if gate is True else g.view(B, T, H, 1))
    want = y.reshape(B, T, d) @ attn.proj.weight.t() + attn.proj.bias
    torch.testing.assert_close(attn(x), want, atol=1e-10, rtol=1e-10)


def _grads(block, task, impl, ids, mask, labels, **kw):
    torch.manual_seed(1)  # the same weights on every path
    model = randomize(build_model(small_cfg(block, task, attn_impl=impl, **kw)), seed=3, scale=0.3).double()
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits, {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("gate", [True, "headwise"])
@pytest.mark.parametrize("task,padded", [("clm", False), ("mlm", False), ("mlm", True)])
def test_every_attention_path_gates_alike(gate, task, padded):
    """sdpa, materialized and fused (which runs SDPA for softmax attention, the gate outside the kernel)
    agree forward and backward, the gate's gradient included."""
    ids, labels, mask = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16)), None
    if padded:
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[0, 10:] = 0
        labels = labels.masked_fill(mask == 0, -100)
    la, ga = _grads("pre-ln", task, "sdpa", ids, mask, labels, attn_gate=gate)
    real = slice(None) if mask is None else mask.bool()
    assert any(".attn.gate." in n for n in ga)
    for impl in ("materialized", "fused"):
        lb, gb = _grads("pre-ln", task, impl, ids, mask, labels, attn_gate=gate)
        torch.testing.assert_close(la[real], lb[real], atol=1e-9, rtol=1e-9)
        for n in ga:
            torch.testing.assert_close(ga[n], gb[n], atol=1e-9, rtol=1e-9, msg=n)


def test_gated_cached_decoding_equals_the_full_forward():
    m = build_model(small_cfg("pre-ln", "translation", attn_gate=True, norm="derf", max_seq_len=32))
    m = randomize(m, seed=4).eval()
    src, tgt = code_ids(2, 7, offset=50) % 90 + 3, code_ids(2, 8, offset=300) % 90 + 3
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    assert_cached_decoding_matches(m, src, tgt, mask)


# ------------------------------------------------------------- causality and padding with the options on

CASES = [(b, dict(norm="derf")) for b in ("pre-ln", "post-ln", "sas-p", "deepnorm", "op", "attn-res")]
CASES += [(b, dict(attn_gate=True)) for b in ("pre-ln", "peri-ln", "rezero", "value-residual", "hyper-connections")]
CASES += [(b, dict(attn_gate="headwise")) for b in ("pre-ln", "mix-ln")]
CASES += [("pre-ln", dict(norm="derf", attn_gate=True, qk_norm=True))]
IDS = [f"{b}-{'-'.join(k if v is True else str(v) for k, v in kw.items())}" for b, kw in CASES]


@pytest.mark.parametrize("block,kw", CASES, ids=IDS)
def test_causality_with_derf_and_the_gate(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", n_layers=4, **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
@pytest.mark.parametrize("block,kw", CASES, ids=IDS)
def test_mlm_padding_invariance_with_derf_and_the_gate(block, kw, impl):
    model = randomize(build_model(small_cfg(block, "mlm", attn_impl=impl, **kw)), seed=2, scale=0.2)
    assert_padding_invariant(model)


# ------------------------------------------------------------------------------------ short runs learn


@pytest.mark.parametrize(
    "kw", [dict(norm="derf"), dict(attn_gate=True), dict(attn_gate="headwise")], ids=["derf", "gate", "headwise"]
)
def test_a_short_run_learns_with_derf_or_the_gate(kw):
    assert_learns(small_cfg("pre-ln", **kw))
