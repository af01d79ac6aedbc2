"""MUDDFormer (blocks/mudd.py): against a port of the official PyTorch model's forward (Caiyun-AI/MUDDFormer,
pytorch/muddformer/modeling_muddformer.py, written from it) at equal weights in float64 to 1e-10, forward and
gradient; the initial weights the official training code gives (W2 = 0, the static weights one-hot on the newest
output, W1 ~ N(0, 1/d)), at which the model is Pre-LN; the widths; compilation; and the generic properties."""

import math

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model, param_groups
from blocklab.blocks.mudd import DynamicDense
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import (
    assert_causal,
    assert_padding_invariant,
    assert_same_logits_and_grads,
    randomize,
    reference_attention,
    small_cfg,
)


def test_causal():
    assert_causal(randomize(build_model(small_cfg("muddformer", "clm")), seed=1, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
def test_mlm_padding_invariance(impl):
    assert_padding_invariant(randomize(build_model(small_cfg("muddformer", "mlm", attn_impl=impl)), seed=2, scale=0.2))


def test_a_short_run_learns():
    assert_learns(small_cfg("muddformer", n_layers=4))


# ------------------------------------------------------------------------------------ the official model


def official_logits(model, ids):
    """MUDDFormer.forward with dense_type 'qkvr', dynamic_dense and sepln, written from the official code: the
    hidden states [x], then per layer TransformerBlock.forward (layer 0: one attention_norm on x; later: res =
    x[-1] and attention_norms on x[0], x[1], x[2]; h = res + attention, out = h + ffn(ffn_norm(h))), then
    MultiwayDynamicDenseBlock (RMSnormNoscale, w1, GELU, w2, 'B T (C L) -> C B T L') plus dense_bs, and
    layer_mix: x_c = sum_j dw[c, :, :, j] hiddens[j]; the last layer's single x[0] to the final norm. The FFN is
    blocklab's MLP, the model's own sub-layer (the official one is SwiGLU)."""
    x = model.token_embedding(ids, "pos")
    hiddens = [x]
    for i, b in enumerate(model.blocks):
        if i == 0:
            res, (xq, xk, xv) = x, (b.norms[0](x),) * 3
        else:
            res, (xq, xk, xv) = x[-1], (b.norms[0](x[0]), b.kv_norms[0](x[1]), b.kv_norms[1](x[2]))
        a = reference_attention(
            xq @ b.attn.q.weight.T, xk @ b.attn.k.weight.T, xv @ b.attn.v.weight.T, b.attn.cfg.n_heads
        )
        h = res + a @ b.attn.proj.weight.T
        out = h + b.mlp(b.norms[1](h))
        hiddens.append(out)
        normed = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + b.dense.eps)
        dw = F.gelu(normed @ b.dense.w1.weight.T) @ b.dense.w2.weight.T  # B T (C L)
        C = b.dense.ways
        dw = dw.unflatten(-1, (C, i + 2)).permute(2, 0, 1, 3) + b.dense.a.view(C, i + 2)[:, None, None, :]
        x = tuple(sum(dw[c, :, :, j, None] * hiddens[j] for j in range(i + 2)) for c in range(C))
    return model.final_norm(x[0]) @ model.head_weight.T


def test_muddformer_equals_the_official_forward():
    """Every parameter off its init (W2 and the static weights included), float64: logits and every
    parameter's gradient to 1e-10."""
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg("muddformer", n_layers=3)).double(), seed=6, scale=0.3)
    assert all(b.dense.w2.weight.abs().min() > 0 for b in model.blocks)
    ids = code_ids(2, 12)
    assert_same_logits_and_grads(model, model(ids).logits, official_logits(model, ids))


# ------------------------------------------------------------------------------------------------- init


def test_initial_dense_weights_as_the_official_training_code_sets_them():
    """W2 = 0 and a_i one-hot on the newest output for every stream (`current_only`), so A_i = a_i for every
    token; four streams but in the last block (one); hidden width C n, four times it in the last block; W1 drawn
    N(0, 1/d) (measured over every block of a wider model)."""
    L = 4
    model = build_model(small_cfg("muddformer", n_layers=L))
    for l, b in enumerate(model.blocks):
        C, n = (1, l + 2) if l == L - 1 else (4, l + 2)
        assert (b.dense.ways, b.dense.n) == (C, n)
        assert b.dense.w1.weight.shape == (C * n * (4 if l == L - 1 else 1), 32)
        assert not b.dense.w2.weight.any()
        assert torch.equal(b.dense.a.view(C, n), torch.eye(n)[-1].expand(C, n))
        w = b.dense.weights(torch.randn(2, 5, 32))
        assert torch.equal(w, b.dense.a.view(C, n).expand_as(w))
        assert len(b.kv_norms) == (2 if l else 0)
    wide = build_model(small_cfg("muddformer", d_model=256, n_heads=4, n_layers=6))
    w1 = torch.cat([b.dense.w1.weight.flatten() for b in wide.blocks])
    assert w1.numel() > 20_000 and w1.mean().abs() < 0.01 * w1.std()
    assert w1.std().item() == pytest.approx(1 / math.sqrt(256), rel=0.03)


def test_muddformer_is_pre_ln_at_init():
    """Every stream starts as the newest output X_i, and the three attention norms are equal (unit gain at init),
    so with Pre-LN's weights (off their init) every hidden state (the residual stream X^R) and the logits are
    Pre-LN's."""
    torch.manual_seed(0)
    pre = randomize(build_model(small_cfg("pre-ln")), seed=1, scale=0.2)
    mudd = build_model(small_cfg("muddformer"))
    loaded = mudd.load_state_dict(pre.state_dict(), strict=False)
    assert loaded.unexpected_keys == [] and all(".dense." in k or ".kv_norms." in k for k in loaded.missing_keys)
    with torch.no_grad():
        for b in mudd.blocks:
            for norm in b.kv_norms:
                norm.weight.copy_(b.norms[0].weight)  # as at init: the three norms alike
    ids = code_ids(2, 16)
    a, b = pre(ids, output_hidden_states=True), mudd(ids, output_hidden_states=True)
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(y, x, rtol=0, atol=1e-6)
    torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=1e-5)


def test_static_weights_are_not_decayed_and_the_dense_matrices_are():
    model = build_model(small_cfg("muddformer"))
    decayed, free = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)].split(".", 2)[2] for p in decayed["params"] if ".dense." in names[id(p)]} == {
        "dense.w1.weight",
        "dense.w2.weight",
    }
    assert {names[id(p)].split(".", 2)[2] for p in free["params"] if ".dense." in names[id(p)]} == {"dense.a"}


def test_compiling_a_block_leaves_its_dense_connections_eager():
    model = randomize(build_model(small_cfg("muddformer", n_layers=2)), seed=3, scale=0.1)
    ids = torch.randint(0, 97, (2, 9))
    want = model(ids).logits
    for block in model.blocks:
        block.compile(backend="eager")
    assert all(isinstance(b.dense, DynamicDense) for b in model.blocks)
    assert all(getattr(b.dense.forward, "_torchdynamo_disable", False) for b in model.blocks)
    torch.testing.assert_close(model(ids).logits, want, rtol=1e-6, atol=1e-6)
