"""SPEC 2c's last norm placements. `hybridnorm` (Zhuo et al. 2025): the attention reads the block input itself, with
the config's norm on each head's queries, keys and values; the MLP in HybridNorm's Post-Norm position
y = N(x_m) + MLP(N(x_m)); HybridNorm* (`hybridnorm_first_pre`) makes block 0 Pre-LN. `resi-dual` (Xie et al.
2023): the Post-LN stream and the dual sum, output x_a + N(x_d), written out by hand. Both: causality, padding
invariance and a short run that learns."""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import build_model
from blocklab.attention.functional import merge_heads, split_heads
from blocklab.blocks import NO_HOOKS, REGISTRY, model_hooks
from blocklab.blocks.placements import (
    DualStreams,
    HybridNorm,
    QKVNorm,
    QKVNormAttention,
    ResiDual,
    ResiDualDecoderBlock,
)
from blocklab.layers import DyT, RMSNorm
from blocklab.model import count_parameters
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import (
    assert_cached_decoding_matches,
    assert_causal,
    assert_padding_invariant,
    assert_translates,
    randomize,
    small_cfg,
    train_reversal_pairs,
)

VARIANTS = [
    pytest.param("hybridnorm", {}, id="hybridnorm"),
    pytest.param("hybridnorm", {"hybridnorm_first_pre": True}, id="hybridnorm-star"),
    pytest.param("resi-dual", {}, id="resi-dual"),
]


def test_registered_as_successors():
    hn, rd = REGISTRY["hybridnorm"], REGISTRY["resi-dual"]
    assert hn.cls is HybridNorm and rd.cls is ResiDual
    for spec in (hn, rd):
        assert spec.family == "successor" and spec.dropout and spec.public
        assert spec.recipe == () and spec.beta_ff is None and spec.beta_sa is None
    assert hn.decoder is None and rd.decoder is ResiDualDecoderBlock
    assert hn.final_norm and model_hooks("hybridnorm") is NO_HOOKS
    assert not rd.final_norm and isinstance(model_hooks("resi-dual"), DualStreams)
    # HybridNorm always normalises queries and keys: the qk_norm option is refused, the others apply
    assert "qk_norm" not in hn.options and {"dyt", "derf", "attn_gate"} <= set(hn.options)
    with pytest.raises(ValueError, match="qk_norm=True does not apply to block 'hybridnorm'"):
        small_cfg("hybridnorm", qk_norm=True)
    with pytest.raises(ValueError, match="block='hybridnorm' is not offered for task='translation'"):
        small_cfg("hybridnorm", "translation")


# ----------------------------------------------------------------------------------------------- HybridNorm


def attention_inputs(model, ids):
    """(the hidden states, what each block's attention was called with)."""
    seen = []
    hooks = [b.attn.register_forward_pre_hook(lambda m, args: seen.append(args[0])) for b in model.blocks]
    out = model(ids, output_hidden_states=True)
    for h in hooks:
        h.remove()
    return out.hidden_states, seen


def test_hybridnorm_attention_reads_the_block_input_itself():
    model = randomize(build_model(small_cfg("hybridnorm")), seed=1, scale=0.2)
    hidden, seen = attention_inputs(model, torch.randint(0, 97, (2, 12)))
    assert len(seen) == 3
    for x, a in zip(hidden[:-1], seen, strict=True):
        assert torch.equal(a, x)  # no norm: the stream itself
        assert not torch.allclose(a, model.blocks[0].norms[0](x), atol=1e-3)  # which a norm would change
    assert all(len(b.norms) == 1 for b in model.blocks)  # the one norm is the MLP's


def test_hybridnorm_star_block_0_is_pre_ln():
    """HybridNorm*: block 0's attention reads Norm(x) and its MLP is Pre-LN's, u + MLP(Norm(u)); later blocks
    are HybridNorm's. The QKV norms stay in block 0 (the official code sets them for every layer)."""
    model = randomize(build_model(small_cfg("hybridnorm", hybridnorm_first_pre=True)), seed=1, scale=0.2)
    hidden, seen = attention_inputs(model, torch.randint(0, 97, (2, 12)))
    first = model.blocks[0]
    assert len(first.norms) == 2 and all(len(b.norms) == 1 for b in model.blocks[1:])
    assert isinstance(first.attn.qk_norm, QKVNorm)
    torch.testing.assert_close(seen[0], first.norms[0](hidden[0]))
    assert not torch.allclose(seen[0], hidden[0], atol=1e-3)
    assert torch.equal(seen[1], hidden[1]) and torch.equal(seen[2], hidden[2])
    x = torch.randn(2, 9, 32) * 2
    u = x + first.attn(first.norms[0](x))
    torch.testing.assert_close(first(x), u + first.mlp(first.norms[1](u)))
    # one more d-wide norm than HybridNorm: block 0's attention pre-norm
    assert count_parameters(model) == count_parameters(build_model(small_cfg("hybridnorm"))) + 32


def test_hybridnorm_block_equation_on_random_weights():
    """y = N(x_m) + MLP(N(x_m)), x_m = x + MHA_QKV(x): SPEC 2c and the official code, not Post-LN's N(x_m + MLP(x_m))."""
    model = randomize(build_model(small_cfg("hybridnorm", n_layers=2)), seed=2, scale=0.2)
    x = torch.randn(2, 9, 32) * 2
    for b in model.blocks:
        h = b.norms[0](x + b.attn(x))
        torch.testing.assert_close(b(x), h + b.mlp(h))
        x_m = x + b.attn(x)
        assert not torch.allclose(b(x), b.norms[0](x_m + b.mlp(x_m)), atol=1e-3)


@pytest.mark.parametrize("norm,kind", [("rmsnorm", RMSNorm), ("layernorm", nn.LayerNorm), ("dyt", DyT)])
def test_hybridnorm_norms_queries_keys_and_values_per_head_with_the_configs_norm(norm, kind):
    model = build_model(small_cfg("hybridnorm", n_layers=2, norm=norm))
    for b in model.blocks:
        assert isinstance(b.attn, QKVNormAttention)
        for m in (b.attn.qk_norm.q, b.attn.qk_norm.k, b.attn.qk_norm.v):
            assert isinstance(m, kind) and m.weight.shape == (8,)  # d_h = 32 / 4, one gain shared by the heads
    assert isinstance(model.final_norm, kind)


def test_hybridnorm_attention_is_the_formula():
    """softmax(N(q_h) N(k_h)^T / sqrt(d_h)) N(v_h), heads merged, times W^O, written out in float64."""
    model = randomize(build_model(small_cfg("hybridnorm")), seed=3, scale=0.3).double()
    attn = model.blocks[1].attn
    B, T, H, dh = 2, 9, 4, 8
    x = torch.randn(B, T, 32, dtype=torch.float64)

    def rms(t, g):
        return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * g

    q, k, v = (
        rms(split_heads(x @ lin.weight.t(), H), n.weight)
        for lin, n in ((attn.q, attn.qk_norm.q), (attn.k, attn.qk_norm.k), (attn.v, attn.qk_norm.v))
    )
    s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    want = merge_heads(s.softmax(-1) @ v) @ attn.proj.weight.t()
    torch.testing.assert_close(attn(x), want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_hybridnorm_attention_ignores_the_scale_of_each_heads_queries_keys_and_values(which):
    """Scaling one head's rows of W^Q, W^K or W^V changes nothing (a norm per head); in Pre-LN's attention it does."""
    x = torch.randn(2, 12, 32) * 2
    for block, invariant in (("hybridnorm", True), ("pre-ln", False)):
        attn = randomize(build_model(small_cfg(block)), seed=2, scale=0.2).blocks[1].attn
        ref = attn(x)
        with torch.no_grad():
            getattr(attn, which).weight[8:16] *= 7.0  # head 1 only: a norm over all of d would see it
        assert torch.allclose(attn(x), ref, atol=1e-5, rtol=1e-4) == invariant, block


# ------------------------------------------------------------------------------------------------- ResiDual


def test_resi_dual_streams_enter_as_the_embedding_and_only_the_last_block_owns_the_dual_norm():
    model = build_model(small_cfg("resi-dual", n_layers=3))
    x = torch.randn(2, 5, 32)
    state = model.block_hooks.enter(model, x)
    assert state[0] is x and state[1] is x
    assert [b.dual_norm is None for b in model.blocks] == [True, True, False]
    assert isinstance(model.blocks[-1].dual_norm, RMSNorm) and isinstance(model.final_norm, nn.Identity)


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_resi_dual_output_is_x_a_plus_norm_of_x_d_by_hand(task):
    """Two blocks written out from their own sub-modules: x_a <- N(x_a + F(x_a)), x_d <- x_d + F(x_a) for the
    attention then the MLP of each block, both streams from the embedding; the model's final hidden state (what
    the head reads) is x_a + N_d(x_d), and the hidden state after block 1 is x_a + N_d(x_d) at that point."""
    model = randomize(build_model(small_cfg("resi-dual", task, n_layers=2, norm="layernorm")), seed=4, scale=0.3)
    ids = torch.randint(0, 97, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 8:] = 0
    out = model(ids, attention_mask=mask if task == "mlm" else None, output_hidden_states=True)
    key_mask = mask.bool() if task == "mlm" else None
    x_a = x_d = model.embed(ids)
    after = []
    for b in model.blocks:
        f = b.attn(x_a, key_mask)
        x_a, x_d = b.norms[0](x_a + f), x_d + f
        f = b.mlp(x_a)
        x_a, x_d = b.norms[1](x_a + f), x_d + f
        after.append(x_a + model.blocks[-1].dual_norm(x_d))
    want = x_a + model.blocks[-1].dual_norm(x_d)
    torch.testing.assert_close(out.hidden_states[-1], want)
    torch.testing.assert_close(out.logits, want @ model.tok.weight.t())
    for got, w in zip(out.hidden_states[1:], after, strict=True):
        torch.testing.assert_close(got, w)
    # both streams count: neither the Post-LN stream alone nor the dual sum alone is the output
    assert not torch.allclose(want, x_a, atol=1e-3) and not torch.allclose(want, x_d, atol=1e-3)


def test_resi_dual_post_ln_stream_is_post_ln():
    """With the dual stream cut out (N_d's output zeroed), the model is Post-LN with the same weights."""
    torch.manual_seed(3)
    model = randomize(build_model(small_cfg("resi-dual")), seed=5, scale=0.2)
    post = build_model(small_cfg("post-ln"))
    post.load_state_dict({k: v for k, v in model.state_dict().items() if "dual_norm" not in k})
    with torch.no_grad():
        model.blocks[-1].dual_norm.weight.zero_()
    ids = torch.randint(0, 97, (2, 12))
    torch.testing.assert_close(model(ids).logits, post(ids).logits)


def test_resi_dual_decoder_by_hand():
    """Two decoder blocks written out from their own sub-modules: both streams start as the target embedding, each
    of the self-attention, the cross-attention and the MLP reads x_a and adds to both, x_a <- N(x_a + F(x_a)),
    x_d <- x_d + F(x_a); the decoder's output (what the head reads) is x_a + N_d(x_d), N_d the last block's."""
    torch.manual_seed(0)
    cfg = small_cfg("resi-dual", "translation", n_layers=1, n_decoder_layers=2, norm="layernorm")
    m = randomize(build_model(cfg), seed=3, scale=0.3)
    assert [b.dual_norm is None for b in m.decoder_blocks] == [True, False]
    assert isinstance(m.decoder_norm, nn.Identity) and isinstance(m.encoder_norm, nn.Identity)
    src, tgt = code_ids(2, 7), code_ids(2, 6, offset=300)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0
    memory, _ = m.encode(src, mask)
    key_mask = mask.bool()
    x_a = x_d = m.embed(tgt, "tgt")
    for b in m.decoder_blocks:
        f = b.self_attn(x_a)
        x_a, x_d = b.norms[0](x_a + f), x_d + f
        f = b.cross_attn(x_a, key_mask, memory=memory)
        x_a, x_d = b.norms[1](x_a + f), x_d + f
        f = b.mlp(x_a)
        x_a, x_d = b.norms[2](x_a + f), x_d + f
    want = x_a + m.decoder_blocks[-1].dual_norm(x_d)
    torch.testing.assert_close(m.decode(tgt, memory, mask), want)
    torch.testing.assert_close(m(src, mask, decoder_input_ids=tgt).logits, want @ m.tok.weight.t())
    assert not torch.allclose(want, x_a, atol=1e-3) and not torch.allclose(want, x_d, atol=1e-3)


@pytest.mark.parametrize("n_decoder_layers", [1, 3])
def test_resi_dual_cached_decoding_equals_the_full_forward(n_decoder_layers):
    """One decoder block both splits and joins the streams; three pass the pair between them."""
    torch.manual_seed(1)
    cfg = small_cfg("resi-dual", "translation", n_layers=2, n_decoder_layers=n_decoder_layers)
    m = randomize(build_model(cfg), seed=2, scale=0.2).eval()
    src, tgt = code_ids(2, 7), code_ids(2, 8, offset=200)
    mask = torch.ones_like(src)
    mask[0, 5:] = 0
    assert_cached_decoding_matches(m, src, tgt, mask)


def test_resi_dual_translation_trains_and_translates():
    """Adam without warm-up (lr 1e-2) on four fixed sentence pairs (target: the source reversed and shifted): the
    loss falls far, and greedy and beam decoding then give the learned translations."""
    torch.manual_seed(0)
    m = build_model(small_cfg("resi-dual", "translation", n_layers=2, n_decoder_layers=3, max_seq_len=32))
    src = code_ids(4, 8) % 90 + 3  # clear of <pad>, <mask>, <eod>
    losses, labels = train_reversal_pairs(m, src, steps=40)
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.05 * losses[0], losses  # measured over seeds 0-3: 0.0006 to 0.0009 of the first loss
    assert_translates(m, src, labels)


# ------------------------------------------------------------------------------ causality, padding, learning


@pytest.mark.parametrize("block,kw", VARIANTS)
def test_causality_on_random_parameters(block, kw):
    assert_causal(randomize(build_model(small_cfg(block, "clm", **kw)), seed=1, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
@pytest.mark.parametrize("block,kw", VARIANTS)
def test_mlm_padding_invariance(block, kw, impl):
    model = randomize(build_model(small_cfg(block, "mlm", attn_impl=impl, **kw)), seed=2, scale=0.2)
    assert_padding_invariant(model)


@pytest.mark.parametrize("block,kw", VARIANTS)
def test_a_short_run_learns(block, kw):
    assert_learns(small_cfg(block, n_layers=4, **kw))
