"""Frac-Connections (blocks/frac.py): against a port of the paper's own PyTorch pseudocode (Appendix A, Algorithms
2 and 3, written from it) at equal weights in float64 to 1e-10, forward and gradient; Pre-LN exactly at init
(eq. 15); static against dynamic; which parameters are decayed; and the generic properties."""

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model, param_groups
from blocklab.blocks.frac import FracConnection, FracConnections
from blocklab.errors import ConfigError
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_causal, assert_padding_invariant, assert_same_logits_and_grads, randomize, small_cfg

CFGS = [
    pytest.param({}, id="dynamic-m2"),
    pytest.param({"hc_dynamic": False}, id="static-m2"),
    pytest.param({"frac_fractions": 4}, id="dynamic-m4"),
]


@pytest.mark.parametrize("kw", CFGS)
def test_causal(kw):
    assert_causal(randomize(build_model(small_cfg("frac-connections", "clm", **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("kw", CFGS)
def test_mlm_padding_invariance(kw):
    assert_padding_invariant(randomize(build_model(small_cfg("frac-connections", "mlm", **kw)), seed=2, scale=0.2))


@pytest.mark.parametrize("kw", CFGS[:2])
def test_a_short_run_learns(kw):
    assert_learns(small_cfg("frac-connections", n_layers=4, **kw))


def test_fractions_must_divide_the_width():
    with pytest.raises(ConfigError, match="frac_fractions=3 does not divide d_model=32"):
        small_cfg("frac-connections", frac_fractions=3)
    with pytest.raises(
        ConfigError, match="frac_fractions=3 does not apply to block 'pre-ln'; it applies to: frac-connections"
    ):
        small_cfg("pre-ln", frac_fractions=3)  # another block has no fractions: refused, not ignored


# --------------------------------------------------------------------------------- the paper's pseudocode


def paper_width_connection(c: FracConnection, h, m):
    """Algorithm 2's `width_connection`: h reshaped to (m, d / m); LayerNorm per fraction; alpha = tanh(norm_h
    @ dynamic_alpha_fn) * dynamic_alpha_scale + static_alpha (m x 2m); beta likewise from dynamic_beta_fn (d / m)
    and static_beta (m); mix_h = alpha^T @ h_reshape (2m x d / m)."""
    h_reshape = h.reshape(*h.shape[:-1], m, h.shape[-1] // m)
    static_alpha, static_beta = c.static_alpha.view(m, 2 * m), c.static_beta
    if not c.dynamic:
        return static_alpha.transpose(-1, -2) @ h_reshape, static_beta.expand(*h_reshape.shape[:-1])
    norm_h = F.layer_norm(h_reshape, (h_reshape.shape[-1],), c.norm.weight, c.norm.bias, c.norm.eps)
    alpha = torch.tanh(norm_h @ c.w_alpha.weight.T) * c.s_alpha + static_alpha
    beta = torch.tanh(norm_h @ c.w_beta.weight[0]) * c.s_beta + static_beta
    return alpha.transpose(-1, -2) @ h_reshape, beta


def paper_depth_connection(mix_h, h_o, beta, m):
    """Algorithm 2's `depth_connection`: beta[..., None] * h_o reshaped (m, d / m) + mix_h[m:], back to d."""
    h = beta[..., None] * h_o.reshape(*h_o.shape[:-1], m, h_o.shape[-1] // m) + mix_h[..., m:, :]
    return h.reshape(*h.shape[:-2], -1)


def paper_block(b, h, m):
    """Algorithm 3: per sub-layer, width_connection, the sub-layer on mix_h[:m] reshaped to d (with its norm),
    depth_connection."""
    subs = (lambda x: b.attn(b.norms[0](x)), lambda x: b.mlp(b.norms[1](x)))
    for c, f in zip(b.frac, subs):
        mix_h, beta = paper_width_connection(c, h, m)
        h = paper_depth_connection(mix_h, f(mix_h[..., :m, :].reshape(*h.shape)), beta, m)
    return h


@pytest.mark.parametrize("m,dynamic", [(2, True), (4, True), (2, False)])
def test_frac_connections_equal_the_papers_pseudocode(m, dynamic):
    """Every parameter off its init (the zero dynamic W included), LayerNorm as the pseudocode's hc norm,
    float64: logits and every parameter's gradient to 1e-10."""
    torch.manual_seed(0)
    cfg = small_cfg("frac-connections", norm="layernorm", frac_fractions=m, hc_dynamic=dynamic)
    model = randomize(build_model(cfg).double(), seed=5, scale=0.3)
    ids = code_ids(2, 12)
    ours = model(ids).logits
    x = model.token_embedding(ids, "pos")
    for b in model.blocks:
        x = paper_block(b, x, m)
    assert_same_logits_and_grads(model, ours, model.final_norm(x) @ model.head_weight.T)


# ------------------------------------------------------------------------------------------------- init


@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("dynamic", [True, False])
def test_frac_connections_are_pre_ln_exactly_at_init(m, dynamic):
    """Eq. 15: Y = A = I, B = 1, dynamic W = 0 and s = 0.01: with Pre-LN's weights (off their init) every hidden
    state and the logits are Pre-LN's, bit for bit."""
    torch.manual_seed(0)
    pre = randomize(build_model(small_cfg("pre-ln")), seed=1, scale=0.2)
    frac = build_model(small_cfg("frac-connections", frac_fractions=m, hc_dynamic=dynamic))
    loaded = frac.load_state_dict(pre.state_dict(), strict=False)
    assert loaded.unexpected_keys == [] and all(".frac." in k for k in loaded.missing_keys)
    for c in (c for b in frac.blocks for c in b.frac):
        eye = torch.eye(m)
        assert torch.equal(c.static_alpha.view(m, 2 * m), torch.cat([eye, eye], 1))
        assert torch.equal(c.static_beta, torch.ones(m))
        if dynamic:
            assert c.w_alpha.weight.shape == (2 * m, 32 // m) and c.w_beta.weight.shape == (1, 32 // m)
            assert not c.w_alpha.weight.any() and not c.w_beta.weight.any()
            assert c.s_alpha.item() == pytest.approx(0.01) and c.s_beta.item() == pytest.approx(0.01)
    ids = code_ids(2, 16)
    a, b = pre(ids, output_hidden_states=True), frac(ids, output_hidden_states=True)
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert torch.equal(x, y)
    assert torch.equal(a.logits, b.logits)


def test_dynamic_adds_a_norm_and_projections_per_fraction_width_and_static_parts_are_not_decayed():
    """Dynamic per connection: a norm of width d / m, W_alpha (d / m x 2m), W_beta (d / m), s_alpha, s_beta (the
    paper's count, eq. 19); static: m (2m + 1) entries (eq. 16). Static parts and scales undecayed, W decayed."""
    m, d, L = 2, 32, 3
    static = build_model(small_cfg("frac-connections", hc_dynamic=False))
    dynamic = build_model(small_cfg("frac-connections"))
    pre = build_model(small_cfg("pre-ln"))
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(static) - count(pre) == 2 * L * m * (2 * m + 1)
    assert count(dynamic) - count(static) == 2 * L * (d // m + (d // m) * (2 * m + 1) + 2)  # RMSNorm's d / m
    decayed, free = param_groups(dynamic, 0.1)
    names = {id(p): n.split(".frac.")[-1].split(".", 1)[-1] for n, p in dynamic.named_parameters() if ".frac." in n}
    assert {names[id(p)] for p in decayed["params"] if id(p) in names} == {"w_alpha.weight", "w_beta.weight"}
    assert {names[id(p)] for p in free["params"] if id(p) in names} == {
        "static_alpha",
        "static_beta",
        "s_alpha",
        "s_beta",
        "norm.weight",
    }


def test_hc_mhc_and_frac_are_one_block_that_differs_in_its_connection_alone():
    """One block class, Pre-LN's sub-layers inside a connection each: HC, mHC and Frac-Connections name their
    connection (and where it is kept, the checkpoints' parameter names) and add no code of their own."""
    from blocklab.blocks.hyper import MHC, ConnectedBlock, HyperConnection, HyperConnections, ManifoldHyperConnection

    for block, connection, slot in (
        (HyperConnections, HyperConnection, "hc"),
        (MHC, ManifoldHyperConnection, "hc"),
        (FracConnections, FracConnection, "frac"),
    ):
        assert issubclass(block, ConnectedBlock) and (block.connection, block.slot) == (connection, slot)
        assert not {"__init__", "forward"} & set(vars(block)), block.__name__
    wide = build_model(small_cfg("mhc", n_layers=2))
    assert [type(c) for b in wide.blocks for c in b.hc] == [ManifoldHyperConnection] * 4
