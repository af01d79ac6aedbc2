"""NormFormer and OLMo 2's reordered norm (blocks/norm_positions.py): each against a port of its authors' code
written from it (fairseq's TransformerDecoderLayer with --scale-attn --scale-fc --scale-heads; OLMo-core's
ReorderedNormTransformerBlock), at equal weights in float64 to 1e-10, forward and gradient; each one's
property at init; and the generic properties (causality, padding invariance, a short run that learns)."""

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model
from blocklab.blocks import REGISTRY
from blocklab.layers import RMSNorm
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import (
    assert_causal,
    assert_padding_invariant,
    assert_same_logits_and_grads,
    randomize,
    reference_attention,
    small_cfg,
)

CASES = [
    pytest.param("normformer", {}, id="normformer"),
    pytest.param("normformer", {"normformer_head_scale": "output"}, id="normformer-output"),
    pytest.param("olmo2", {}, id="olmo2"),
]


@pytest.mark.parametrize("block,kw", CASES)
def test_causal(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("block,kw", CASES)
def test_mlm_padding_invariance(block, kw):
    assert_padding_invariant(randomize(build_model(small_cfg(block, "mlm", **kw)), seed=2, scale=0.2))


@pytest.mark.parametrize("block,kw", CASES)
def test_a_short_run_learns(block, kw):
    assert_learns(small_cfg(block, n_layers=4, **kw))


def test_registered_with_their_options_and_no_recipe():
    for block in ("normformer", "olmo2"):
        spec = REGISTRY[block]
        assert spec.public and spec.family == "successor" and spec.final_norm and spec.recipe == ()
    assert "canon" in REGISTRY["normformer"].options and "qk_norm" in REGISTRY["normformer"].options
    assert "qk_norm" not in REGISTRY["olmo2"].options and "canon" not in REGISTRY["olmo2"].options


def assert_same_function(model, reference, ids):
    """model(ids) and reference(ids) (logits built from the model's own parameters): logits and gradients."""
    assert_same_logits_and_grads(model, model(ids).logits, reference(ids))


def off_init(block, **kw):
    torch.manual_seed(0)
    return randomize(build_model(small_cfg(block, norm="layernorm", **kw)).double(), seed=4, scale=0.3)


# ------------------------------------------------------------------------------------------------ NormFormer


def fairseq_normformer_layer(b, x, scale_heads_after_out_proj: bool):
    """fairseq's TransformerDecoderLayerBase.forward with normalize_before and --scale-attn --scale-fc
    --scale-heads, written from it: x = self_attn_layer_norm(x); self_attn (out_proj included); c_attn on the
    (heads, d_h) view of its output; attn_ln; residual; final_layer_norm; fc1, activation, ffn_layernorm, fc2;
    residual. `scale_heads_after_out_proj=False`: the paper's Concat(gamma_h head_h) W^O instead."""
    H = b.attn.cfg.n_heads
    gamma = b.output_scale if scale_heads_after_out_proj else b.attn.head_scale
    h = b.norms[0](x)
    heads = reference_attention(h @ b.attn.q.weight.T, h @ b.attn.k.weight.T, h @ b.attn.v.weight.T, H)
    if not scale_heads_after_out_proj:
        heads = (heads.unflatten(-1, (H, -1)) * gamma[:, None]).flatten(-2)
    a = heads @ b.attn.proj.weight.T
    if scale_heads_after_out_proj:
        a = torch.einsum("tbhd,h->tbhd", a.unflatten(-1, (H, -1)), gamma).flatten(-2)
    x = x + b.post_attn_norm(a)
    up = F.relu(b.norms[1](x) @ b.mlp.fc1.weight.T)
    return x + b.mlp.mid_norm(up) @ b.mlp.fc2.weight.T


@pytest.mark.parametrize("where", ["output", "heads"])
def test_normformer_equals_fairseqs_layer(where):
    """--scale-heads as fairseq runs it (`output`) and as the paper writes it (`heads`), every parameter off
    its init (the head scales included), in float64."""
    model = off_init("normformer", normformer_head_scale=where)

    def reference(ids):
        x = model.token_embedding(ids, "pos")
        for b in model.blocks:
            x = fairseq_normformer_layer(b, x, where == "output")
        return model.final_norm(x) @ model.head_weight.T

    assert_same_function(model, reference, code_ids(2, 12))


def test_normformer_head_scales_start_at_one_and_the_two_placements_differ_off_init():
    """Every head scale is 1 at init, where the paper's placement and fairseq's are one function (the same seed
    builds the same weights for both); with the scales off 1 they are two."""
    models = {}
    for where, name in (("heads", "attn.head_scale"), ("output", "output_scale")):
        torch.manual_seed(0)
        models[where] = build_model(small_cfg("normformer", normformer_head_scale=where))
        scales = [p for n, p in models[where].named_parameters() if n.endswith(name)]
        assert len(scales) == 3 and all(torch.equal(s, torch.ones(4)) for s in scales)
    a, b = models["heads"], models["output"]
    ids = code_ids(2, 12)
    torch.testing.assert_close(a(ids).logits, b(ids).logits, rtol=0, atol=0)
    with torch.no_grad():
        for x, y in zip(a.blocks, b.blocks):
            x.attn.head_scale.copy_(torch.tensor([0.5, 1.5, 2.0, 0.7]))
            y.output_scale.copy_(torch.tensor([0.5, 1.5, 2.0, 0.7]))
    assert (a(ids).logits - b(ids).logits).abs().max() > 1e-3


def test_normformer_norms_sit_after_attention_and_inside_the_mlp():
    model = build_model(small_cfg("normformer", norm="layernorm", d_ff=48))
    b = model.blocks[0]
    assert b.post_attn_norm.normalized_shape == (32,) and b.mlp.mid_norm.normalized_shape == (48,)
    pre = build_model(small_cfg("pre-ln", norm="layernorm", d_ff=48))
    missing, unexpected = model.load_state_dict(pre.state_dict(), strict=False)
    assert unexpected == [] and {k.split(".", 2)[2] for k in missing} == {
        "attn.head_scale",
        "post_attn_norm.weight",
        "post_attn_norm.bias",
        "mlp.mid_norm.weight",
        "mlp.mid_norm.bias",
    }


# --------------------------------------------------------------------------------------------------- OLMo 2


def olmo_core_reordered_block(b, x):
    """OLMo-core's ReorderedNormTransformerBlock.forward with its Attention (qk_norm over the whole projections,
    use_head_qk_norm off), written from it: h = x + attention_norm(attention(x)); h + feed_forward_norm(ff(h));
    attention: q_norm(w_q x), k_norm(w_k x), w_v x, split into heads, causal softmax attention, w_out."""
    q, k = b.attn.qk_norm.q(x @ b.attn.q.weight.T), b.attn.qk_norm.k(x @ b.attn.k.weight.T)
    a = reference_attention(q, k, x @ b.attn.v.weight.T, b.attn.cfg.n_heads) @ b.attn.proj.weight.T
    h = x + b.norms[0](a)
    return h + b.norms[1](F.relu(h @ b.mlp.fc1.weight.T) @ b.mlp.fc2.weight.T)


def test_olmo2_equals_olmo_cores_reordered_norm_block():
    model = off_init("olmo2")

    def reference(ids):
        x = model.token_embedding(ids, "pos")
        for b in model.blocks:
            x = olmo_core_reordered_block(b, x)
        return model.final_norm(x) @ model.head_weight.T

    assert_same_function(model, reference, code_ids(2, 12))


def test_olmo2_at_init_each_sub_layer_adds_a_unit_rms_vector_and_its_qk_norms_span_the_projections():
    """No norm before a sub-layer, a unit-gain RMSNorm after it: at init every branch adds a vector of RMS 1
    per token (up to the norm's eps: the branches start small, so eps 1e-12 here), whatever the input's scale;
    the QK norms are d wide (not d_h), unit gain, RMSNorm even under norm="layernorm" (they normalise queries
    and keys, not the stream)."""
    model = build_model(small_cfg("olmo2", norm_eps=1e-12))
    for b in build_model(small_cfg("olmo2", norm="layernorm")).blocks:
        assert isinstance(b.attn.qk_norm.q, RMSNorm) and b.attn.qk_norm.q.weight.shape == (32,)
    x = 50 * model.token_embedding(code_ids(2, 12), "pos")  # far from unit scale
    for b in model.blocks:
        assert torch.equal(b.attn.qk_norm.q.weight, torch.ones(32))
        y = b(x)
        u = x + b.norms[0](b.attn(x))
        for branch in (u - x, y - u):
            torch.testing.assert_close(branch.pow(2).mean(-1), torch.ones(2, 12), rtol=1e-4, atol=1e-4)
        x = y
