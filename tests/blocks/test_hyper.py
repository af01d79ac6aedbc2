"""Hyper-Connections and mHC (blocks/hyper.py, SPEC 2c): n residual streams between blocks. Their equations,
the papers' properties at init (HC is Pre-LN at init; mHC's H_res doubly stochastic, at init and after
training steps), static against dynamic connections, which parameters are decayed, and the generic
properties (causality, padding invariance, a short run that learns) with the streams' options."""

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model, param_groups
from blocklab.blocks import hyper
from blocklab.blocks.hyper import (
    PRE_EPS,
    SINKHORN_EPS,
    START,
    HyperConnection,
    ManifoldHyperConnection,
    sinkhorn_knopp,
    start_biases,
)
from blocklab.errors import ConfigError
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import assert_causal, randomize, small_cfg

# Sinkhorn-Knopp ends on the columns, each then summing to s / (s + eps) = 1 - eps (DeepSeek's reference eps in
# every sum), to float32 rounding.
COLUMNS_ATOL = SINKHORN_EPS + 1e-6

STREAM_CFGS = [
    pytest.param("hyper-connections", {}, id="hc-dynamic"),
    pytest.param("hyper-connections", {"hc_dynamic": False}, id="hc-static"),
    pytest.param("hyper-connections", {"hc_streams": 1}, id="hc-n1"),
    pytest.param("mhc", {}, id="mhc"),
    pytest.param("mhc", {"hc_streams": 2}, id="mhc-n2"),
]


def run_streams(model, ids):
    """The (B, T, n, d) streams after each block: the hooks' `enter`, then the blocks, as the model runs them."""
    H = model.block_hooks.enter(model, model.token_embedding(ids, "pos"))
    out = []
    for block in model.blocks:
        H = block(H)
        out.append(H)
    return out


def pre_ln_and(block, n_layers=3, **kw):
    """A Pre-LN model off its init, and a `block` model with the same embeddings, sub-layers and norms (its
    connections at init). The streams' own settings (hc_*) go to `block` alone: Pre-LN refuses them."""
    shared = {k: v for k, v in kw.items() if not k.startswith("hc_")}
    torch.manual_seed(0)
    pre = randomize(build_model(small_cfg("pre-ln", n_layers=n_layers, **shared)), seed=1, scale=0.2)
    wide = build_model(small_cfg(block, n_layers=n_layers, **kw))
    loaded = wide.load_state_dict(pre.state_dict(), strict=False)
    assert loaded.unexpected_keys == [] and all(".hc." in k for k in loaded.missing_keys)
    return pre, wide


# ------------------------------------------------------------------------------- generic properties


@pytest.mark.parametrize("block,kw", STREAM_CFGS)
def test_causal(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("block,kw", STREAM_CFGS)
def test_mlm_padding_invariance(block, kw):
    model = randomize(build_model(small_cfg(block, "mlm", **kw)), seed=2, scale=0.2)
    ids = torch.randint(0, 97, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, 97, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    torch.testing.assert_close(model(padded_ids, attention_mask=mask).logits[:, :12], short, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)  # the mask is what does it


@pytest.mark.parametrize("block,kw", [STREAM_CFGS[0], STREAM_CFGS[1], STREAM_CFGS[3]])
def test_a_short_run_learns(block, kw):
    assert_learns(small_cfg(block, n_layers=4, **kw))


@pytest.mark.parametrize("block", ["hyper-connections", "mhc"])
def test_the_state_is_n_streams_and_the_hidden_state_their_sum(block):
    model = randomize(build_model(small_cfg(block, hc_streams=3)), seed=3, scale=0.2)
    ids = code_ids(2, 16)
    streams = run_streams(model, ids)
    assert all(H.shape == (2, 16, 3, 32) for H in streams)
    out = model(ids, output_hidden_states=True)
    torch.testing.assert_close(out.hidden_states[0], model.token_embedding(ids, "pos"))
    for H, h in zip(streams, out.hidden_states[1:]):
        torch.testing.assert_close(h, H.sum(-2))
    logits = model.final_norm(streams[-1].sum(-2)) @ model.head_weight.t()
    torch.testing.assert_close(out.logits, logits)


@pytest.mark.parametrize("block", ["hyper-connections", "mhc"])
def test_streams_stay_fp32_under_autocast(block):
    """The streams are mixed outside autocast, so under bf16 autocast they stay float32 from block to block,
    as Pre-LN's residual stream does, and mHC's mappings are float32 sums (columns of H_res exact)."""
    model = randomize(build_model(small_cfg(block)), seed=7, scale=0.2)
    ids = code_ids(2, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        streams = run_streams(model, ids)
        if block == "mhc":
            M = model.blocks[1].hc[0].mappings(streams[0])[2]
            torch.testing.assert_close(M.sum(-2), torch.ones(M.shape[:-1]), rtol=0, atol=COLUMNS_ATOL)
    assert all(H.dtype == torch.float32 for H in streams)
    full = run_streams(model, ids)[-1]
    assert (streams[-1] - full).norm() < 0.05 * full.norm()  # bf16 sub-layers, fp32 streams


# --------------------------------------------------------------------------------- Hyper-Connections


def test_hc_initial_connections():
    """HC eq. 14: A_m = e_(k mod n), A_r = I, B = 1 for sub-layer k (attention 2l, MLP 2l + 1); W = 0, s = 0.01."""
    n = 3
    model = build_model(small_cfg("hyper-connections", n_layers=4, hc_streams=n))
    for l, block in enumerate(model.blocks):
        for j, hc in enumerate(block.hc):
            k = 2 * l + j
            want = torch.cat([torch.eye(n)[:, [k % n]], torch.eye(n)], dim=1)
            assert torch.equal(hc.static_alpha.view(n, n + 1), want)
            assert torch.equal(hc.static_beta, torch.ones(n))
            assert hc.w_alpha.weight.shape == (n + 1, 32) and hc.w_beta.weight.shape == (1, 32)
            assert not hc.w_alpha.weight.any() and not hc.w_beta.weight.any()
            assert hc.s_alpha.item() == pytest.approx(0.01) and hc.s_beta.item() == pytest.approx(0.01)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("n", [1, 4])
def test_hc_is_pre_ln_at_init(n, dynamic, norm):
    """What HC at init equals, with Pre-LN's sub-layer weights (off their init): every stream IS Pre-LN's
    residual stream after every block, bit for bit (A_m^T H reads one stream, all streams are equal, and each
    gets the same F_k added); the hidden state, their sum, is n times Pre-LN's; and the output N_f(n x) equals
    Pre-LN's N_f(x) up to the final norm's eps only: exactly N_f(x) with eps / n^2. With n = 1 the whole model
    is Pre-LN (HC eq. 15)."""
    pre, hc = pre_ln_and("hyper-connections", hc_streams=n, hc_dynamic=dynamic, norm=norm)
    ids = code_ids(2, 16)
    x = pre.token_embedding(ids, "pos")
    for block, H in zip(pre.blocks, run_streams(hc, ids)):
        x = block(x)
        assert torch.equal(H, x.unsqueeze(-2).expand_as(H))
    a, b = pre(ids, output_hidden_states=True), hc(ids, output_hidden_states=True)
    for h_pre, h_hc in zip(a.hidden_states[1:], b.hidden_states[1:]):
        torch.testing.assert_close(h_hc, n * h_pre, rtol=1e-6, atol=0)
    fn, eps = pre.final_norm, pre.cfg.norm_eps
    if norm == "rmsnorm":
        shrunk = F.rms_norm(x, (32,), fn.weight, eps / n**2)
    else:
        shrunk = F.layer_norm(x, (32,), fn.weight, fn.bias, eps / n**2)
    torch.testing.assert_close(hc.final_norm(b.hidden_states[-1]), shrunk)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-4, atol=1e-4)
    if n == 1:
        torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0)


def test_hc_leaves_pre_ln_when_its_connections_move():
    """Guard for the test above: the same model with its connections off their init is another function."""
    pre, hc = pre_ln_and("hyper-connections", hc_streams=4)
    with torch.no_grad():
        for block in hc.blocks:
            for c in block.hc:
                c.static_alpha.add_(0.1 * torch.randn_like(c.static_alpha))
    ids = code_ids(2, 16)
    assert not torch.allclose(hc(ids).logits, pre(ids).logits, atol=1e-2)


def reference_hc(hc: HyperConnection, H, f, dynamic: bool):
    """HC eqs. 5 and 10-13 written out: H_bar = Norm(H); B(H) = s_b tanh(H_bar W_b)^T + B;
    A_m(H) = s_a tanh(H_bar W_m) + A_m; A_r(H) = s_a tanh(H_bar W_r) + A_r; H' = B^T F(A_m^T H) + A_r^T H."""
    n = H.shape[-2]
    static = hc.static_alpha.view(n, n + 1)
    A_m, A_r, B = static[:, :1], static[:, 1:], hc.static_beta[:, None]  # (n, 1), (n, n), (n, 1) = B^T
    if dynamic:
        Hb = hc.norm(H)
        W_m, W_r = hc.w_alpha.weight.t()[:, :1], hc.w_alpha.weight.t()[:, 1:]
        B = B + hc.s_beta * torch.tanh(Hb @ hc.w_beta.weight.t())
        A_m = A_m + hc.s_alpha * torch.tanh(Hb @ W_m)
        A_r = A_r + hc.s_alpha * torch.tanh(Hb @ W_r)
    h = torch.einsum("...in,...id->...nd", A_m, H).squeeze(-2)
    return torch.einsum("...i,...d->...id", B.squeeze(-1), f(h)) + torch.einsum("...ij,...id->...jd", A_r, H)


@pytest.mark.parametrize("dynamic", [True, False])
def test_hc_equations_off_init(dynamic):
    model = randomize(build_model(small_cfg("hyper-connections", hc_dynamic=dynamic)), seed=4, scale=0.3)
    H = torch.randn(2, 7, 4, 32)
    f = model.blocks[1].mlp  # any sub-layer
    for block in model.blocks:
        for hc in block.hc:
            torch.testing.assert_close(hc(H, f), reference_hc(hc, H, f, dynamic), rtol=1e-5, atol=1e-5)


def test_hc_static_against_dynamic():
    """Static HC (hc_dynamic=False) has the static matrices only, the same for every token; dynamic HC adds, per
    sub-layer, a Norm (d), W_alpha (d x (n + 1)), W_beta (d) and the scalars s_alpha, s_beta, and its
    connections depend on the token (once W is off zero)."""
    n, d, L = 4, 32, 3
    static = build_model(small_cfg("hyper-connections", hc_dynamic=False))
    dynamic = build_model(small_cfg("hyper-connections"))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(dynamic) - count(static) == 2 * L * (d + d * (n + 1) + d + 2)
    assert {n for n, _ in static.blocks[0].hc[0].named_parameters()} == {"static_alpha", "static_beta"}
    pre = build_model(small_cfg("pre-ln"))
    assert count(static) - count(pre) == 2 * L * (n * (n + 1) + n)
    # with F = 0 a connection is its A_r: the static one maps every token's streams by the stored A_r,
    # the dynamic one by A_r(H), which moves with the token
    H = torch.randn(2, 5, n, d)
    zero = lambda h: torch.zeros_like(h)  # noqa: E731
    for model, varies in ((randomize(static, seed=5), False), (randomize(dynamic, seed=5), True)):
        hc = model.blocks[0].hc[0]
        A_r = hc.static_alpha.view(n, n + 1)[:, 1:]
        same = torch.allclose(hc(H, zero), torch.einsum("ij,...id->...jd", A_r, H), atol=1e-6)
        assert same != varies


# ----------------------------------------------------------------------------------------------- mHC


def test_mhc_initial_mappings():
    """a = 0.01, phi = 0; H_post = 2 sigmoid(0) = 1; H_pre = w e_(k mod n) + (1 - w) 1/n (sum 1) plus the
    reference's eps, and H_res = w I + (1 - w) J/n (doubly stochastic), w = START = 0.01^(1/40); the same for
    every token."""
    n, w = 4, START
    assert w == pytest.approx(0.8913, abs=1e-4)
    model = build_model(small_cfg("mhc", n_layers=3, hc_streams=n))
    H = torch.randn(2, 5, n, 32)
    for l, block in enumerate(model.blocks):
        for j, c in enumerate(block.hc):
            k = 2 * l + j
            assert not c.phi.weight.any() and c.phi.weight.shape == (2 * n + n * n, n * 32)
            assert all(a.item() == pytest.approx(0.01) for a in (c.a_pre, c.a_post, c.a_res))
            H_pre, H_post, H_res = c.mappings(H)
            want = w * torch.eye(n)[k % n] + (1 - w) / n + PRE_EPS
            torch.testing.assert_close(H_pre, want.expand_as(H_pre), rtol=0, atol=1e-7)
            torch.testing.assert_close(H_post, torch.ones_like(H_post), rtol=0, atol=0)
            torch.testing.assert_close(H_res, (w * torch.eye(n) + (1 - w) / n).expand_as(H_res))


def test_mhc_start_is_as_near_the_identity_as_sinkhorn_allows():
    """Sinkhorn-Knopp shrinks an imbalance by s_2(H_res)^2 per round (Knight 2008), s_2 = w at the start: with
    w = START, 20 rounds shrink a perturbation's imbalance about 100-fold; nearer I (w = 0.99) they hardly do."""
    torch.manual_seed(0)

    def shrink(b_res):
        logits = b_res + 1e-3 * torch.randn(200, 4, 4)
        imbalance = lambda M: (M.sum(-1) - 1).abs().max()  # noqa: E731 (columns are exact after each round)
        return imbalance(sinkhorn_knopp(logits, 20)) / imbalance(sinkhorn_knopp(logits, 1))

    _, b_res = start_biases(4, 0)
    assert shrink(b_res) < 0.02
    c = torch.log(torch.tensor((0.99 + 0.01 / 4) / (0.01 / 4)))  # w = 0.99
    assert shrink(c * torch.eye(4)) > 0.3


@pytest.mark.parametrize("with_eps", [False, True])
@pytest.mark.parametrize("n", [1, 4])
def test_mhc_is_pre_ln_at_init(n, with_eps, monkeypatch):
    """As HC: with Pre-LN's sub-layer weights every stream is Pre-LN's residual stream, here to rounding (the
    mappings are mixtures that sum to 1, not 0 and 1), and the logits are Pre-LN's up to the final norm's eps.
    n = 1: H_pre = START (+ eps), which the sub-layer's norm removes up to its eps: Norm(w x; eps) = Norm(x;
    eps / w^2). The reference's eps (1e-6 in H_pre and Sinkhorn-Knopp) moves each sub-layer's input and kept
    streams by about 1e-6 relatively: without it the streams are Pre-LN's to 1e-5, with it to 1e-4."""
    if not with_eps:
        monkeypatch.setattr(hyper, "PRE_EPS", 0.0)
        monkeypatch.setattr(hyper, "SINKHORN_EPS", 0.0)
        monkeypatch.setattr(hyper.sinkhorn_knopp, "__defaults__", (hyper.SINKHORN_ITERS, 0.0))
    pre, mhc = pre_ln_and("mhc", hc_streams=n)
    if n == 1:
        for block in pre.blocks:
            for norm in block.norms:
                norm.eps = pre.cfg.norm_eps / (START + hyper.PRE_EPS) ** 2
    ids = code_ids(2, 16)
    x = pre.token_embedding(ids, "pos")
    tol = 1e-4 if with_eps else 1e-5
    for block, H in zip(pre.blocks, run_streams(mhc, ids)):
        x = block(x)
        torch.testing.assert_close(H, x.unsqueeze(-2).expand_as(H), rtol=tol, atol=tol)
    torch.testing.assert_close(mhc(ids).logits, pre(ids).logits, rtol=1e-4, atol=1e-4)


def h_res_of_every_sublayer(model, ids):
    """H_res of every mHC connection on the streams it reads, (B, T, n, n) each, from a forward pass."""
    found = []
    hooks = [
        m.register_forward_hook(lambda m, args, out: found.append(m.mappings(args[0])[2]))
        for m in model.modules()
        if isinstance(m, ManifoldHyperConnection)
    ]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return found


def assert_doubly_stochastic(M, rows_atol):
    """Columns (each new stream's weights over the old streams) sum to 1 to the last scaling's eps; rows to
    Sinkhorn's residue."""
    assert (M >= 0).all()
    torch.testing.assert_close(M.sum(-2), torch.ones(M.shape[:-1]), rtol=0, atol=COLUMNS_ATOL)
    torch.testing.assert_close(M.sum(-1), torch.ones(M.shape[:-1]), rtol=0, atol=rows_atol)


def test_mhc_h_res_doubly_stochastic_at_init_and_after_training_steps():
    """H_res on the streams each connection reads: doubly stochastic at init and after 5 AdamW steps (columns
    to eps, rows to the residue of 20 Sinkhorn rounds), and by then moved and different per token, but for
    the first connection's."""
    model = build_model(small_cfg("mhc", n_layers=3))
    ids, held = code_ids(4, 24), code_ids(2, 24, offset=3000)
    at_init = h_res_of_every_sublayer(model, held)
    assert len(at_init) == 6
    for M in at_init:
        assert_doubly_stochastic(M, rows_atol=COLUMNS_ATOL)  # a fixed point: rows to eps as the columns
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-3)
    for _ in range(5):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    after = h_res_of_every_sublayer(model, held)
    for M in after:
        assert_doubly_stochastic(M, rows_atol=2e-4)  # measured 6e-5
    for M0, M in zip(at_init[1:-1], after[1:-1]):
        assert (M - M0).abs().max() > 1e-4  # measured >= 5.5e-4
        assert (M - M.mean((0, 1))).abs().max() > 1e-6
    # The first connection reads n equal streams (copies of the embedding): new stream n is then x times H_res's
    # column n sum, 1, whatever H_res, which so gets no gradient (measured 2e-7); the last one reaches the output
    # through its row sums only (the next test), which Sinkhorn-Knopp holds near 1 (measured 1.4e-5).
    torch.testing.assert_close(after[0], at_init[0], rtol=0, atol=1e-6)


def test_the_output_reads_the_last_h_res_through_its_row_sums():
    """New stream n is sum_m H_res[m, n] x_m and the output reads the streams' sum, so the loss depends on the
    last connection's H_res through its row sums only: dL/dH_res[m, n] = <dL/dsum, x_m>, the same for every new
    stream n and different between old streams m (H_res @ x, the other orientation, would make it the same
    down each column instead)."""
    model = randomize(build_model(small_cfg("mhc", n_layers=2)), seed=8, scale=0.1)
    last = model.blocks[-1].hc[1]
    kept, mappings = {}, last.mappings

    def keeping(x):
        pre, post, res = mappings(x)
        res.retain_grad()
        kept["res"] = res
        return pre, post, res

    last.mappings = keeping
    ids = code_ids(2, 10)
    model(ids, labels=ids).loss.backward()
    g = kept["res"].grad  # (B, T, n, n)
    torch.testing.assert_close(g, g[..., :1].expand_as(g), rtol=1e-5, atol=1e-9)
    assert (g - g[..., :1, :]).abs().max() > 1e-4 * g.abs().max()


def test_sinkhorn_knopp():
    """20 rounds of row then column scaling of exp(logits): columns sum to 1 to eps, rows to Sinkhorn's residue,
    entries positive. Without eps a doubly stochastic exp(logits) is a fixed point and n = 1 gives [1]; with the
    reference's eps, both to 1e-6."""
    torch.manual_seed(0)
    M = sinkhorn_knopp(torch.randn(500, 4, 4))
    assert (M > 0).all()
    assert_doubly_stochastic(M, rows_atol=1e-3)
    B = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.7, 0.2], [0.2, 0.1, 0.7]])
    torch.testing.assert_close(sinkhorn_knopp(B.log(), eps=0.0), B)
    assert torch.equal(sinkhorn_knopp(torch.randn(3, 1, 1), eps=0.0), torch.ones(3, 1, 1))
    torch.testing.assert_close(sinkhorn_knopp(B.log()), B, rtol=0, atol=2e-6)
    torch.testing.assert_close(sinkhorn_knopp(torch.randn(3, 1, 1)), torch.ones(3, 1, 1), rtol=0, atol=2e-6)
    assert not torch.equal(sinkhorn_knopp(B.log()), sinkhorn_knopp(B.log(), eps=0.0))  # the eps is there
    # a large-logit matrix is far from converged after one round and close after 20
    L = 3 * torch.randn(200, 4, 4)
    assert (sinkhorn_knopp(L, 1).sum(-1) - 1).abs().max() > 10 * (sinkhorn_knopp(L).sum(-1) - 1).abs().max()


def test_mhc_is_always_dynamic():
    """hc_dynamic is HC's only: mHC refuses it off, in one line naming the blocks that read it, and always
    builds its dynamic projection phi."""
    with pytest.raises(ConfigError, match="hc_dynamic=False does not apply to block 'mhc'; it applies to: hyper-con"):
        small_cfg("mhc", hc_dynamic=False)
    assert "blocks.0.hc.0.phi.weight" in dict(build_model(small_cfg("mhc")).named_parameters())


# ---------------------------------------------------------------------------------------- weight decay


@pytest.mark.parametrize("block", ["hyper-connections", "mhc"])
def test_static_parts_get_no_weight_decay(block):
    """HC's static matrices, mHC's biases and both papers' scales go to the undecayed group by the package's
    rule (fewer than 2 dimensions); the dynamic projections W and phi are decayed, as every weight matrix."""
    model = build_model(small_cfg(block))
    decayed, free = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}

    def own(group):  # "blocks.0.hc.1.static_alpha" -> "static_alpha"
        return {names[id(p)].split(".hc.")[-1].split(".", 1)[-1] for p in group["params"] if ".hc." in names[id(p)]}

    if block == "hyper-connections":
        assert own(decayed) == {"w_alpha.weight", "w_beta.weight"}
        assert own(free) == {"static_alpha", "static_beta", "s_alpha", "s_beta", "norm.weight"}
    else:
        assert own(decayed) == {"phi.weight"}
        assert own(free) == {"a_pre", "a_post", "a_res", "b_pre", "b_post", "b_res"}
