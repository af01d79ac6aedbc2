"""mHC against DeepSeek's reference (TileKernels `tile_kernels/torch/mhc.py`, read, never imported or copied:
`deepseek_mhc` below is written from its equations). At equal weights, in float64, blocklab's model and the
reference give the same logits and the same gradients to 1e-10, with every zero-initialised parameter (phi)
moved off zero; the other orientation of H_res, which blocklab computed before, is 1e-3 away."""

import pytest
import torch

from blocklab import build_model
from blocklab.blocks.hyper import PRE_EPS, SINKHORN_EPS, SINKHORN_ITERS, ManifoldHyperConnection, sublayers
from tests.blocks.test_successors import code_ids
from tests.helpers import assert_same_logits_and_grads, randomize, small_cfg


def deepseek_sinkhorn(x, repeat: int, eps: float):
    """`sinkhorn_normalize_ref`: a row softmax plus eps, then alternate column and row scalings, each sum plus
    eps, the columns' last."""
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def deepseek_mhc(residual, fn, scale, base, f, norm_eps, transpose_comb=False):
    """One sub-layer f of DeepSeek's reference: `mhc_pre_norm_fn_ref` (fn . x scaled by the rms of the flat
    n d-vector), `mhc_pre_split_mixes_ref` (scale per mapping, base; pre = sigmoid + eps, post = 2 sigmoid,
    comb the last n^2 mixes viewed (n, n)), `sinkhorn_normalize_ref`, `mhc_pre_apply_mix_ref` (sum_m pre_m x_m)
    and `mhc_post_ref`: out_n = post_n f(.) + sum_m comb[m, n] x_m ('abmn,abmc->abnc'). residual (..., n, d),
    fn (n (n + 2), n d), scale (3,), base (n (n + 2),). `transpose_comb`: apply comb as comb @ x instead."""
    n = residual.shape[-2]
    flat = residual.flatten(-2)
    mixes = (flat @ fn.T) * (flat.square().mean(-1, keepdim=True) + norm_eps).rsqrt()
    mixes = mixes * torch.cat([scale[0].expand(n), scale[1].expand(n), scale[2].expand(n * n)]) + base
    pre = mixes[..., :n].sigmoid() + PRE_EPS
    post = mixes[..., n : 2 * n].sigmoid() * 2.0
    comb = deepseek_sinkhorn(mixes[..., 2 * n :].unflatten(-1, (n, n)), SINKHORN_ITERS, SINKHORN_EPS)
    if transpose_comb:
        comb = comb.transpose(-1, -2)
    layer_input = (residual * pre.unsqueeze(-1)).sum(-2)
    return f(layer_input).unsqueeze(-2) * post.unsqueeze(-1) + torch.einsum("...mn,...mc->...nc", comb, residual)


def reference_weights(c: ManifoldHyperConnection):
    """blocklab's connection c as the reference's (fn, scale, base): phi's rows are [pre | post | res] as fn's,
    b_res flattened row-major as base's last n^2 entries."""
    return c.phi.weight, torch.stack([c.a_pre, c.a_post, c.a_res]), torch.cat([c.b_pre, c.b_post, c.b_res])


def reference_logits(model, ids, transpose_comb=False):
    """The whole model with every mHC connection computed by the reference: n copies of the embedding output
    (`expand_to_mhc_ref`), then per sub-layer the reference around blocklab's sub-layer, the final norm on the
    streams' sum, the tied head."""
    x = model.token_embedding(ids, "pos")
    H = x.unsqueeze(-2).expand(*x.shape[:-1], model.cfg.hc_streams, x.shape[-1])
    for block in model.blocks:
        for c, f in zip(block.hc, sublayers(block, None)):
            H = deepseek_mhc(H, *reference_weights(c), f, c.eps, transpose_comb)
    return model.final_norm(H.sum(-2)) @ model.head_weight.T


def off_init(n_streams=4, **kw):
    """A float64 mHC model with every parameter moved off its init: phi (zero at init) included."""
    torch.manual_seed(0)
    model = build_model(small_cfg("mhc", hc_streams=n_streams, **kw)).double()
    randomize(model, seed=3, scale=0.1)
    with torch.no_grad():
        for c in (m for m in model.modules() if isinstance(m, ManifoldHyperConnection)):
            assert c.phi.weight.abs().min() > 0  # no zero left where the init had one
            c.phi.weight.mul_(10.0)  # mappings far from their start: rows well off 1 after 20 rounds
    return model


@pytest.mark.parametrize("n_streams", [2, 4])
def test_blocklab_equals_deepseeks_reference_forward_and_gradient(n_streams):
    model = off_init(n_streams)
    ids = code_ids(2, 12)
    ours = model(ids).logits
    assert ours.abs().max() > 0.5  # outputs of order 1, so 1e-10 is a real bound
    assert any(".phi." in n for n, _ in model.named_parameters())
    assert_same_logits_and_grads(model, ours, reference_logits(model, ids))


def test_the_other_orientation_of_h_res_is_far_from_the_reference():
    """Guard: the comparison above tells the orientations apart. comb @ x (new stream i = sum_j comb[i, j] x_j,
    blocklab's computation before) differs from the reference by far more than 1e-10 once H_res is off its
    symmetric start."""
    model = off_init()
    ids = code_ids(2, 12)
    with torch.no_grad():
        ref = reference_logits(model, ids)
        other = reference_logits(model, ids, transpose_comb=True)
    assert (other - ref).abs().max() > 1e-4


def test_each_new_stream_is_a_convex_combination_of_the_old_ones():
    """H_res's columns (the weights of each new stream, in the orientation the reference applies it) are
    non-negative and sum to 1 to Sinkhorn's eps, token by token, far off init; its rows only to Sinkhorn's
    residue, visibly further from 1."""
    model = off_init()
    x = torch.randn(3, 7, 4, 32, dtype=torch.float64)
    for c in (m for m in model.modules() if isinstance(m, ManifoldHyperConnection)):
        _, _, H_res = c.mappings(x)
        assert (H_res >= 0).all()
        columns, rows = H_res.sum(-2), H_res.sum(-1)
        torch.testing.assert_close(columns, torch.ones_like(columns), rtol=0, atol=2 * SINKHORN_EPS)
        assert (rows - 1).abs().max() > 10 * (columns - 1).abs().max()
        # and the block applies it that way: with F = 0 the new streams are H_res^T x
        zero = lambda h: torch.zeros_like(h)  # noqa: E731
        torch.testing.assert_close(c(x, zero), H_res.transpose(-1, -2) @ x, rtol=0, atol=1e-12)
