"""SPEC section 2b's two options for every block: norm="dyt" (Dynamic Tanh in place of every norm layer) and
qk_norm=True (RMSNorm on each head's queries and keys): what they build, what they compute, that the
generic properties (causality, padding invariance, sdpa = materialized) still hold with them on, the
parameter counts, and a short run that learns."""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import BLOCKS, build_model
from blocklab.attention.modules import QKNorm
from blocklab.blocks import REGISTRY
from blocklab.layers import DyT, RMSNorm
from blocklab.model import count_parameters
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_cached_decoding_matches, assert_causal, assert_padding_invariant, randomize, small_cfg

NORMS = (RMSNorm, nn.LayerNorm)
DYT_BLOCKS = tuple(b for b in BLOCKS if b not in ("ngpt", "rezero", "t-fixup"))  # those without a norm layer
QK_BLOCKS = tuple(b for b in BLOCKS if "qk_norm" in REGISTRY[b].options)
TRANSLATION = tuple(b for b in DYT_BLOCKS if "translation" in REGISTRY[b].tasks)  # with norms to replace


# The blocks whose own QK-norm stays RMSNorm under norm="dyt" / "derf" (it normalises queries and keys, not the
# stream, as the qk_norm option's does).
OWN_QK_NORM = ("op", "olmo2")


def paths(model, kinds, skip_qk=True):
    return {n for n, m in model.named_modules() if isinstance(m, kinds) and not (skip_qk and "qk_norm" in n)}


def norm_width(name: str) -> int:
    """The width of the norm at `name` in a small_cfg model (d = 32, 4 heads, d_ff = 64): d_h for hybridnorm's
    per-head q, k, v norms, d_ff for NormFormer's in the MLP, d / m for Frac-Connections' (m = 2), d else."""
    if ".qk_norm." in name:
        return 8
    if name.endswith("mlp.mid_norm"):
        return 64
    return 16 if ".frac." in name else 32


# ------------------------------------------------------------------------------------------- norm="dyt"


def test_dyt_and_qk_norm_apply_to_every_block_with_norms_and_softmax():
    assert {b for b in BLOCKS if "dyt" in REGISTRY[b].options} == set(DYT_BLOCKS)
    assert {"pre-ln", "post-ln", "parallel", "sas", "sas-p", "deepnorm", "peri-ln", "mix-ln", "lns", "rezero"} <= set(
        QK_BLOCKS
    )


@pytest.mark.parametrize("block", DYT_BLOCKS)
def test_dyt_replaces_every_norm(block):
    """No RMSNorm / LayerNorm is left (op's QK-norm aside: it normalises queries and keys, not the stream),
    and a DyT sits exactly where each norm was."""
    normed = build_model(small_cfg(block, n_layers=2))
    dyt = build_model(small_cfg(block, n_layers=2, norm="dyt"))
    assert paths(dyt, NORMS) == set()
    if block not in OWN_QK_NORM:
        assert paths(dyt, NORMS, skip_qk=False) == set()
    assert paths(dyt, DyT) == paths(normed, NORMS)
    for name, m in dyt.named_modules():
        if isinstance(m, DyT):
            assert m.a.shape == () and m.a.item() == 0.5 and m.a.requires_grad
            width = norm_width(name)
            assert torch.equal(m.weight, torch.ones(width)) and torch.equal(m.bias, torch.zeros(width))


@pytest.mark.parametrize("block", ["pre-ln", "peri-ln", "sas-p", "sas-p-nonorm", "op"])
def test_dyt_alpha_sets_a(block):
    model = build_model(small_cfg(block, norm="dyt", dyt_alpha=1.7))
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert dyts and all(m.a.item() == pytest.approx(1.7) for m in dyts)


@pytest.mark.parametrize("block", TRANSLATION)
def test_dyt_in_the_encoder_decoder(block):
    normed = build_model(small_cfg(block, "translation", n_decoder_layers=2))
    dyt = build_model(small_cfg(block, "translation", n_decoder_layers=2, norm="dyt", dyt_alpha=0.8))
    assert paths(dyt, NORMS, skip_qk=False) == set()
    assert paths(dyt, DyT) == paths(normed, NORMS) and any("decoder_blocks" in p for p in paths(dyt, DyT))
    assert all(m.a.item() == pytest.approx(0.8) for m in dyt.modules() if isinstance(m, DyT))


def test_dyt_forward_is_weight_tanh_ax_plus_bias():
    m = DyT(16, alpha=0.5)
    with torch.no_grad():
        m.a.fill_(1.3)
        m.weight.copy_(torch.randn(16))
        m.bias.copy_(torch.randn(16))
    x = torch.randn(3, 5, 16) * 4
    torch.testing.assert_close(m(x), m.weight * torch.tanh(1.3 * x) + m.bias)
    # not a norm: it is not invariant to the input's scale
    assert not torch.allclose(m(x), m(2 * x), atol=1e-3)


def test_dyt_is_what_the_block_computes():
    """A Pre-LN block with norm="dyt": u = x + MHA(DyT(x)); y = u + MLP(DyT(u))."""
    model = randomize(build_model(small_cfg("pre-ln", norm="dyt")), seed=1, scale=0.2)
    x = torch.randn(2, 10, 32) * 3
    b = model.blocks[1]
    d0, d1 = b.norms
    u = x + b.attn(d0.weight * torch.tanh(d0.a * x) + d0.bias)
    torch.testing.assert_close(b(x), u + b.mlp(d1.weight * torch.tanh(d1.a * u) + d1.bias))


@pytest.mark.parametrize("value", [0, -0.5, "big"])
def test_dyt_alpha_must_be_positive(value):
    with pytest.raises(ValueError, match="dyt_alpha"):
        small_cfg("pre-ln", norm="dyt", dyt_alpha=value)


# --------------------------------------------------------------------------------------------- qk_norm


@pytest.mark.parametrize("block", QK_BLOCKS)
def test_qk_norm_builds_a_qk_norm_in_every_attention(block):
    on = build_model(small_cfg(block, qk_norm=True, n_layers=2))
    off = build_model(small_cfg(block, n_layers=2))
    qk = [m for m in on.modules() if isinstance(m, QKNorm)]
    assert len(qk) == 2
    for m in qk:
        assert m.q.weight.shape == (8,) and m.k.weight.shape == (8,)  # d_head = 32 / 4
    if block == "op":  # the OP block always normalises queries and keys: qk_norm=True is what it is
        assert count_parameters(on) == count_parameters(off)
        return
    assert not any(isinstance(m, QKNorm) for m in off.modules())
    assert count_parameters(on) == count_parameters(off) + 2 * 2 * 8


def test_qk_norm_in_both_decoder_attentions():
    m = build_model(small_cfg("pre-ln", "translation", qk_norm=True, n_decoder_layers=2))
    for b in m.decoder_blocks:
        assert isinstance(b.self_attn.qk_norm, QKNorm) and isinstance(b.cross_attn.qk_norm, QKNorm)
    assert sum(isinstance(x, QKNorm) for x in m.modules()) == 3 + 2 * 2


def _scale_head_rows(lin, head, factor, dh=8):
    with torch.no_grad():
        lin.weight[head * dh : (head + 1) * dh] *= factor


@pytest.mark.parametrize("which", ["q", "k"])
def test_qk_norm_makes_pre_ln_invariant_to_the_scale_of_each_heads_queries_and_keys(which):
    """Queries (keys) normalised per head: scaling W^Q (W^K) by 10, or one head's rows of it only, changes
    nothing; without qk_norm both change the output."""
    x = torch.randn(2, 12, 32) * 2
    for qk_norm in (True, False):
        model = randomize(build_model(small_cfg("pre-ln", qk_norm=qk_norm)), seed=2, scale=0.2)
        attn = model.blocks[1].attn
        lin = getattr(attn, which)
        ref = attn(x)
        _scale_head_rows(lin, 0, 7.0)  # one head only: a norm over all of d would see it
        one_head = attn(x)
        with torch.no_grad():
            lin.weight.mul_(10)
        everything = attn(x)
        same = [torch.allclose(y, ref, atol=1e-5, rtol=1e-4) for y in (one_head, everything)]
        assert same == [qk_norm, qk_norm], (qk_norm, same)


def test_qk_norm_attention_is_the_formula():
    """softmax(RMSNorm_gq(q_h) RMSNorm_gk(k_h)^T / sqrt(d_h)) v_h, written out."""
    model = randomize(build_model(small_cfg("pre-ln", qk_norm=True)), seed=3, scale=0.3).double()
    attn = model.blocks[0].attn
    B, T, d, H, dh = 2, 9, 32, 4, 8
    x = torch.randn(B, T, d, dtype=torch.float64)

    def heads(t):
        return t.view(B, T, H, dh).transpose(1, 2)

    def rms(t, g):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    q = rms(heads(x @ attn.q.weight.t()), attn.qk_norm.q.weight)
    k = rms(heads(x @ attn.k.weight.t()), attn.qk_norm.k.weight)
    v = heads(x @ attn.v.weight.t())
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    want = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d) @ attn.proj.weight.t()
    torch.testing.assert_close(attn(x), want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("task", ["clm", "mlm"])
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_shaped_attention_with_qk_norm_is_still_the_identity_at_init(task, norm):
    """The zero query stays zero through the QK-norm: sas-p with beta_ff=0 maps x to beta_SA Norm(x), sas
    with beta_ff=0 maps x to Norm(x)."""
    ids = code_ids(2, 16)
    model = build_model(small_cfg("sas-p", task, norm=norm, beta_ff=0.0, beta_sa=0.7, qk_norm=True))
    out = model(ids, output_hidden_states=True)
    for block, x, y in zip(model.blocks, out.hidden_states[:-1], out.hidden_states[1:]):
        assert isinstance(block.attn.qk_norm, QKNorm)
        assert torch.allclose(y, 0.7 * block.norm(x), atol=1e-5)
    model = build_model(small_cfg("sas", task, norm=norm, beta_ff=0.0, qk_norm=True))
    out = model(ids, output_hidden_states=True)
    for block, x, y in zip(model.blocks, out.hidden_states[:-1], out.hidden_states[1:]):
        assert torch.allclose(y, block.norm1(x), atol=1e-5)


def _grads(block, task, impl, ids, mask, labels, **kw):
    torch.manual_seed(1)
    model = randomize(build_model(small_cfg(block, task, attn_impl=impl, **kw)), seed=3, scale=0.3).double()
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits, {n: p.grad for n, p in model.named_parameters()}


def _close(a, b, tol=1e-9):
    return (a - b).abs().max().item() <= tol * max(1.0, a.abs().max().item())


@pytest.mark.parametrize("block", ["sas", "sas-p", "pre-ln"])
@pytest.mark.parametrize("task,padded", [("clm", False), ("mlm", False), ("mlm", True)])
def test_sdpa_and_materialized_agree_with_qk_norm(block, task, padded):
    ids, labels, mask = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16)), None
    if padded:
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[0, 10:] = 0
        labels = labels.masked_fill(mask == 0, -100)
    la, ga = _grads(block, task, "sdpa", ids, mask, labels, qk_norm=True)
    lb, gb = _grads(block, task, "materialized", ids, mask, labels, qk_norm=True)
    real = slice(None) if mask is None else mask.bool()
    assert _close(la[real], lb[real])
    assert any("qk_norm" in n for n in ga)
    for n in ga:
        assert ga[n] is not None and gb[n] is not None, n
        assert _close(ga[n], gb[n]), n


def test_qk_norm_cached_decoding_equals_the_full_forward():
    m = randomize(build_model(small_cfg("pre-ln", "translation", qk_norm=True, max_seq_len=32)), seed=4).eval()
    src, tgt = code_ids(2, 7, offset=50) % 90 + 3, code_ids(2, 8, offset=300) % 90 + 3
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    assert_cached_decoding_matches(m, src, tgt, mask)


def test_qk_norm_is_refused_where_it_does_not_apply():
    with pytest.raises(ValueError, match="qk_norm=True.*'ngpt'"):
        small_cfg("ngpt", qk_norm=True)
    for block in ("ngpt", "rezero"):  # no norm layer for DyT to replace: refused, not silently ignored
        with pytest.raises(ValueError, match=f"norm='dyt'.*'{block}'"):
            small_cfg(block, norm="dyt")


# ------------------------------------------------------------- causality and padding with the options on

OPTION_CASES = [(b, dict(norm="dyt")) for b in ("pre-ln", "sas-p", "deepnorm", "peri-ln", "op", "mix-ln")]
OPTION_CASES += [(b, dict(qk_norm=True)) for b in ("pre-ln", "sas-p", "deepnorm", "peri-ln", "mix-ln")]
OPTION_CASES += [("pre-ln", dict(norm="dyt", qk_norm=True)), ("sas", dict(norm="dyt", qk_norm=True))]
IDS = [f"{b}-{'-'.join(k if v is True else str(v) for k, v in kw.items())}" for b, kw in OPTION_CASES]


@pytest.mark.parametrize("block,kw", OPTION_CASES, ids=IDS)
def test_causality_with_options(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", n_layers=4, **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
@pytest.mark.parametrize("block,kw", OPTION_CASES, ids=IDS)
def test_mlm_padding_invariance_with_options(block, kw, impl):
    model = randomize(build_model(small_cfg(block, "mlm", attn_impl=impl, **kw)), seed=2, scale=0.2)
    assert_padding_invariant(model)


# --------------------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize(
    "block,per_block_norms,final", [("pre-ln", 2, 1), ("sas-p", 1, 1), ("sas", 2, 1), ("post-ln", 2, 0)]
)
@pytest.mark.parametrize("norm,qk", [("dyt", False), ("rmsnorm", True), ("dyt", True)])
def test_parameter_counts_with_options(block, per_block_norms, final, norm, qk):
    """Each norm of width d: d (RMSNorm) or 2d + 1 (DyT: g, b, a); qk_norm adds 2 d_h per attention."""
    cfg = dict(vocab_size=97, max_seq_len=24, d_model=32, n_layers=3, n_heads=4, d_ff=64)
    base = count_parameters(build_model(small_cfg(block, **cfg)))
    n_norms = 3 * per_block_norms + final
    want = base + n_norms * ((2 * 32 + 1) - 32 if norm == "dyt" else 0) + (3 * 2 * 8 if qk else 0)
    assert count_parameters(build_model(small_cfg(block, norm=norm, qk_norm=qk, **cfg))) == want


# ------------------------------------------------------------------------------------ short runs learn


@pytest.mark.parametrize(
    "block,kw",
    [
        ("pre-ln", dict(norm="dyt")),
        ("pre-ln", dict(qk_norm=True)),
        ("sas-p", dict(qk_norm=True)),
        ("op", dict(norm="dyt")),
    ],
    ids=["pre-ln-dyt", "pre-ln-qk_norm", "sas-p-qk_norm", "op-dyt"],
)
def test_a_short_run_learns_with_options(block, kw):
    assert_learns(small_cfg(block, **kw))
