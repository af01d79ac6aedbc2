"""The canon option (Canon layers, Allen-Zhu 2025; layers.Canon and the blocks that take it): against a port of
the official LlamaCanon layer's placements and ShortConvolution (facebookresearch/PhysicsLM4, huggingface/, written
from it) at equal weights in float64 to 1e-10, forward and gradient; the convolution as the code initialises it;
causality, padding; which blocks and tasks take it; a short run that learns."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab import build_model
from blocklab.blocks import BLOCKS, REGISTRY
from blocklab.errors import ConfigError
from blocklab.layers import Canon, NoCanon
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import (
    assert_causal,
    assert_padding_invariant,
    assert_same_logits_and_grads,
    randomize,
    reference_attention,
    small_cfg,
)

CANON_BLOCKS = ("pre-ln", "lns", "normformer")


def test_canon_applies_to_the_pre_ln_shaped_blocks_and_not_to_translation():
    assert {b for b in BLOCKS if "canon" in REGISTRY[b].options} == set(CANON_BLOCKS)
    with pytest.raises(ConfigError, match="does not apply to block 'post-ln'"):
        small_cfg("post-ln", canon="A")
    with pytest.raises(ConfigError, match="does not apply to task='translation'"):
        small_cfg("pre-ln", "translation", canon="A")
    for bad in ("", "E", "BA", "AA", "abcd"):
        with pytest.raises(ConfigError, match="canon="):
            small_cfg("pre-ln", canon=bad)
    assert small_cfg("pre-ln", canon="ACD").canon == "ACD"


def test_each_position_builds_one_canon_layer_of_its_width():
    model = build_model(small_cfg("pre-ln", n_layers=1, d_ff=48, canon="ABCD"))
    b = model.blocks[0]
    widths = {"canon_a": 32, "canon_c": 32, "attn.canon": 96, "mlp.canon": 48}  # B: q, k, v side by side
    assert {n: m.in_channels for n, m in b.named_modules() if isinstance(m, Canon)} == widths
    for name in widths:
        m = b.get_submodule(name)
        assert m.groups == m.in_channels == m.out_channels and m.kernel_size == (4,) and m.bias is None
    one = build_model(small_cfg("pre-ln", n_layers=1, canon="C")).blocks[0]
    assert [n for n, m in one.named_modules() if isinstance(m, Canon)] == ["canon_c"]
    assert isinstance(one.canon_a, NoCanon) and isinstance(one.attn.canon, NoCanon)


def test_the_convolution_starts_as_the_codes_reset_parameters():
    """The official ShortConvolution is an nn.Conv1d (groups = channels, padding kernel - 1, no bias) started by
    its own reset_parameters(): Canon draws exactly those numbers, uniform in +-1/sqrt(4), and the model's
    init_weights leaves them as drawn."""
    torch.manual_seed(7)
    ours = Canon(64)
    torch.manual_seed(7)
    code = nn.Conv1d(64, 64, 4, groups=64, padding=3, bias=False)
    assert torch.equal(ours.weight, code.weight)
    w = ours.weight
    assert w.abs().max() <= 0.5 and w.abs().max() > 0.45 and w.std() > 0.25  # uniform(-0.5, 0.5): std 0.289
    torch.manual_seed(3)
    model = build_model(small_cfg("pre-ln", canon="ABCD"))
    for m in (m for m in model.modules() if isinstance(m, Canon)):
        bound = 1 / m.kernel_size[0] ** 0.5
        assert m.weight.abs().max() <= bound and m.weight.std() > 0.5 * bound  # not re-drawn by init_weights


def short_convolution(x, weight):
    """ShortConvolution.forward without the fast kernel, written from it: x (B, T, D) to (B, D, T), Conv1d with
    padding k - 1, the first T outputs: y_t = sum_j w[j] x_{t + j - (k - 1)}, zeros before the first position."""
    k = weight.shape[-1]
    xp = F.pad(x.transpose(1, 2), (k - 1, 0))
    y = sum(weight[:, 0, j, None] * xp[..., j : j + x.shape[1]] for j in range(k))
    return y.transpose(1, 2)


def llama_canon_layer(b, x, mask):
    """LlamaCanonDecoderLayer.forward with canon_set ABCD (residual on, no bias, no activation), written from it:
    canonA on input_layernorm(x); canonB on cat(q, k, v) after the projections; canonC on
    post_attention_layernorm(h); canonD on the MLP's up-projection (here W1 x, blocklab's MLP not being gated);
    apply_canon zeroes the masked positions first (x.mul_(mask)) and adds the input."""

    def canon(conv, h):
        return h + short_convolution(h * mask[..., None], conv.weight)

    h = canon(b.canon_a, b.norms[0](x))
    qkv = canon(b.attn.canon, torch.cat([h @ w.T for w in (b.attn.q.weight, b.attn.k.weight, b.attn.v.weight)], -1))
    x = x + reference_attention(*qkv.chunk(3, -1), b.attn.cfg.n_heads) @ b.attn.proj.weight.T
    up = canon(b.mlp.canon, canon(b.canon_c, b.norms[1](x)) @ b.mlp.fc1.weight.T)
    return x + F.relu(up) @ b.mlp.fc2.weight.T


def test_pre_ln_with_canon_equals_the_official_layers():
    """canon="ABCD" on Pre-LN, every parameter off its init, float64, a padded batch (the masking's zeros):
    the real tokens' logits and every parameter's gradient to 1e-10."""
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg("pre-ln", canon="ABCD")).double(), seed=8, scale=0.3)
    ids = code_ids(2, 12)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0
    ours = model(ids, attention_mask=mask).logits
    x = model.token_embedding(ids, "pos")
    for b in model.blocks:
        x = llama_canon_layer(b, x, mask.double())
    ref = model.final_norm(x) @ model.head_weight.T
    real = mask.bool()
    assert_same_logits_and_grads(model, ours[real], ref[real])


def test_a_left_padded_row_reads_zeros_before_its_first_token():
    """With its mask, a Canon layer gives the real positions of a left-padded row what it gives the row alone:
    the padded positions are zeroed first, as the convolution's own zeros before position 0."""
    conv = randomize(Canon(8), seed=2, scale=0.3)
    row = torch.randn(1, 5, 8)
    padded = torch.cat([100 * torch.randn(1, 3, 8), row], 1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    torch.testing.assert_close(conv(padded, mask)[:, 3:], conv(row), rtol=0, atol=1e-6)
    assert not torch.allclose(conv(padded)[:, 3:], conv(row), atol=1e-3)  # the mask is what does it


@pytest.mark.parametrize("block", CANON_BLOCKS)
@pytest.mark.parametrize("canon", ["A", "B", "C", "D", "ABCD"])
def test_causal_with_canon(block, canon):
    assert_causal(randomize(build_model(small_cfg(block, "clm", canon=canon)), seed=1, scale=0.2))


@pytest.mark.parametrize("block", CANON_BLOCKS)
def test_mlm_padding_invariance_with_canon(block):
    assert_padding_invariant(randomize(build_model(small_cfg(block, "mlm", canon="ABCD")), seed=2, scale=0.2))


@pytest.mark.parametrize("block", CANON_BLOCKS)
def test_a_short_run_learns_with_canon(block):
    assert_learns(small_cfg(block, n_layers=4, canon="ABCD"))
