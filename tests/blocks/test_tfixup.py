"""T-Fixup (SPEC section 2c; Huang et al. 2020, official code layer6ai-labs/T-Fixup): no norm, x <- x + F(x), and
the weights at the scales of its formulas for clm, mlm and translation; causality, padding, a short run that
learns, and an encoder-decoder that trains and translates.

Causality and padding on random parameters, and the generic facts of every block, also run in
tests/blocks/test_blocks.py, tests/test_registry.py and tests/blocks/test_options.py / test_derf_gate.py.
"""

import math

import pytest
import torch
import torch.nn as nn

from blocklab import build_model
from blocklab.blocks import REGISTRY, block_recipe
from blocklab.blocks.tfixup import TFixup, TFixupDecoderBlock
from blocklab.layers import POINTWISE_NORMS, RMSNorm
from blocklab.probes.measure import probe_batch
from tests.blocks.test_successors import assert_learns, code_ids
from tests.helpers import (
    assert_cached_decoding_matches,
    assert_causal,
    assert_translates,
    randomize,
    small_cfg,
    train_reversal_pairs,
)

NORMS = (RMSNorm, nn.LayerNorm, *POINTWISE_NORMS.values())
D, FF, V = 128, 384, 512  # ~16k to 50k draws per family: a std estimate within about 1%
N, M = 2, 6  # N != M, and the three translation scales 0.56, 0.37, 0.49 far apart: a swapped formula fails


def enc_scale(n):
    return 0.67 * n**-0.25


def dec_scale(m):
    return (9 * m) ** -0.25


def emb_std(n, d=D):
    return d**-0.5 * (9 * n) ** -0.25


def xavier_std(lin, gain):
    fan_out, fan_in = lin.weight.shape
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def std_kurtosis(ws):
    w = torch.cat([w.detach().flatten() for w in ws]).double()
    std = w.std().item()
    return std, ((w - w.mean()) ** 4).mean().item() / std**4


def check_xavier_uniform(lins, gain, what):
    std, kurt = std_kurtosis(lin.weight for lin in lins)
    assert std == pytest.approx(xavier_std(lins[0], gain), rel=0.03), what
    assert kurt == pytest.approx(1.8, abs=0.1), what  # uniform (1.8), as fairseq's xavier_uniform_; not normal (3)


def check_embedding(model, n, init):
    std, kurt = std_kurtosis([model.tok.weight])
    assert std == pytest.approx(emb_std(n), rel=0.03)
    assert kurt == pytest.approx(3.0, abs=0.2)  # N(0, d^-1/2) times the scale
    # the input factor is the model's: fairseq's embed_scale (kept by the official code) under init="xavier"
    assert model.embed_scale == pytest.approx(math.sqrt(D) if init == "xavier" else 1.0)
    assert model.head_weight is model.tok.weight  # the tied head is the scaled matrix


def check_attention(attns, scale, what):
    check_xavier_uniform([a.q for a in attns] + [a.k for a in attns], 2**-0.5, f"{what} q, k")
    check_xavier_uniform([a.v for a in attns], scale, f"{what} v")  # fairseq's 1/sqrt(2) times sqrt(2)
    check_xavier_uniform([a.proj for a in attns], scale, f"{what} proj")


def no_norms(model):
    return [n for n, m in model.named_modules() if isinstance(m, NORMS)]


def lm(task, n=4, **kw):
    return build_model(small_cfg("t-fixup", task, d_model=D, d_ff=FF, n_layers=n, vocab_size=V, **kw))


def translation(n=N, m=M, **kw):
    base = dict(d_model=D, n_layers=n, n_decoder_layers=m, d_ff=FF, vocab_size=V, max_seq_len=32)
    base.update(kw)
    return build_model(small_cfg("t-fixup", "translation", **base))


# ----------------------------------------------------------------------------------- the init's scales


@pytest.mark.parametrize("init", ["normal", "xavier"])
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_language_model_weights_have_the_formulas_scales(task, init):
    """clm takes the decoder's rule (9M)^(-1/4), mlm the encoder's 0.67 N^(-1/4) (SPEC 2c), whatever `init` says;
    the embedding N(0, 1/d) (9N)^(-1/4) either way."""
    n = 4
    model = lm(task, n, init=init)
    scale = dec_scale(n) if task == "clm" else enc_scale(n)
    assert abs(dec_scale(n) - enc_scale(n)) > 0.1 * scale  # the two rules far enough apart to tell
    check_embedding(model, n, init)
    check_attention([b.attn for b in model.blocks], scale, task)
    check_xavier_uniform([b.mlp.fc1 for b in model.blocks], scale, f"{task} fc1")
    check_xavier_uniform([b.mlp.fc2 for b in model.blocks], scale, f"{task} fc2")
    # positions keep the config's init (the code scales the token embedding only)
    assert model.pos.weight.std().item() == pytest.approx(0.02 if init == "normal" else D**-0.5, rel=0.1)
    assert not no_norms(model) and isinstance(model.final_norm, nn.Identity)


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_translation_weights_have_the_formulas_scales(init):
    """Encoder 0.67 N^(-1/4), decoder (9M)^(-1/4) on both attentions' V and W^P and the MLP, the shared embedding
    (9N)^(-1/4) (the official code's --share-all-embeddings), N != M."""
    m = translation(init=init)
    assert len(m.blocks) == N and len(m.decoder_blocks) == M
    assert all(isinstance(b, TFixup) for b in m.blocks)
    assert all(isinstance(b, TFixupDecoderBlock) for b in m.decoder_blocks)
    check_embedding(m, N, init)
    enc, dec = m.blocks, m.decoder_blocks
    check_attention([b.attn for b in enc], enc_scale(N), "encoder")
    for name in ("fc1", "fc2"):
        check_xavier_uniform([getattr(b.mlp, name) for b in enc], enc_scale(N), f"encoder {name}")
        check_xavier_uniform([getattr(b.mlp, name) for b in dec], dec_scale(M), f"decoder {name}")
    check_attention([b.self_attn for b in dec], dec_scale(M), "decoder self")
    check_attention([b.cross_attn for b in dec], dec_scale(M), "decoder cross")
    assert not no_norms(m)
    assert isinstance(m.encoder_norm, nn.Identity) and isinstance(m.decoder_norm, nn.Identity)


def test_the_init_is_t_fixups_whatever_the_config_says():
    """Under init="normal" and "xavier" the same seed gives the same weights, all but the positions'."""
    params = []
    for init in ("normal", "xavier"):
        torch.manual_seed(3)
        params.append(dict(translation(n=2, m=1, d_model=32, d_ff=64, init=init).named_parameters()))
    differ = {n for n in params[0] if not torch.equal(params[0][n], params[1][n])}
    assert differ == {"src_pos.weight", "tgt_pos.weight"}


def test_scales_follow_the_depths():
    for n, mm in ((1, 1), (6, 2), (3, 12)):
        m = translation(n=n, m=mm, d_model=64, d_ff=64, vocab_size=4096)
        assert m.tok.weight.std().item() == pytest.approx(emb_std(n, 64), rel=0.03)
        assert m.decoder_blocks[0].mlp.fc2.weight_init.gain == pytest.approx(dec_scale(mm), rel=1e-12)
        assert m.blocks[0].attn.v.weight_init.gain == pytest.approx(enc_scale(n), rel=1e-12)


# ------------------------------------------------------------------------------- equations and options


def test_blocks_are_plain_residual_branches():
    """Encoder: u = x + MHA(x); y = u + MLP(u). Decoder: u = x + SA(x), v = u + CA(u, m), y = v + MLP(v)."""
    m = randomize(translation(d_model=32, d_ff=64), seed=1, scale=0.2)
    x, mem = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, 3:] = False
    for b in m.blocks:
        u = mem + b.attn(mem, key_mask)
        torch.testing.assert_close(b(mem, key_mask), u + b.mlp(u))
    for b in m.decoder_blocks:
        u = x + b.self_attn(x)
        v = u + b.cross_attn(u, key_mask, memory=mem)
        torch.testing.assert_close(b(x, b.cross_attn.keys_values(mem), key_mask), v + b.mlp(v))


def test_spec_options_and_recipe():
    spec = REGISTRY["t-fixup"]
    assert (spec.label, spec.family, spec.has_norms, spec.final_norm, spec.dropout) == (
        "T-Fixup",
        "successor",
        False,
        False,
        True,
    )
    assert set(spec.tasks) == {"clm", "mlm", "translation", "classification"}
    assert block_recipe("t-fixup") == {"train.warmup_steps": 0}
    for kw, said in ((dict(norm="dyt"), "norm='dyt'"), (dict(norm="derf"), "norm='derf'")):
        with pytest.raises(ValueError, match=f"{said} does not apply to block 't-fixup'"):
            small_cfg("t-fixup", **kw)
    # qk_norm adds per-head norms on queries and keys only; the gate leaves the stream without norms
    m = build_model(small_cfg("t-fixup", qk_norm=True, attn_gate=True))
    assert all("qk_norm" in n for n in no_norms(m)) and no_norms(m)


# --------------------------------------------------------------------------- causality, padding, learning


def test_causal_at_init_and_on_random_parameters():
    assert_causal(build_model(small_cfg("t-fixup", "clm")))
    assert_causal(randomize(build_model(small_cfg("t-fixup", "clm")), seed=4, scale=0.2))


@pytest.mark.parametrize("impl", ["sdpa", "materialized"])
def test_mlm_padding_invariance(impl):
    model = randomize(build_model(small_cfg("t-fixup", "mlm", attn_impl=impl)), seed=2, scale=0.2)
    ids = torch.randint(0, 97, (2, 12))
    short = model(ids, attention_mask=torch.ones(2, 12, dtype=torch.long)).logits
    padded_ids = torch.cat([ids, torch.randint(0, 97, (2, 7))], dim=1)
    mask = torch.cat([torch.ones(2, 12), torch.zeros(2, 7)], dim=1).long()
    padded = model(padded_ids, attention_mask=mask).logits
    torch.testing.assert_close(short, padded[:, :12], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(short, model(padded_ids).logits[:, :12], atol=1e-3)  # the mask is what does it


def test_a_short_clm_run_learns():
    assert_learns(small_cfg("t-fixup", n_layers=4))


def test_cached_decoding_equals_the_full_forward():
    # milder random weights than a normed block's: a norm-free stack amplifies float32 rounding with depth
    m = randomize(translation(m=2, d_model=32, d_ff=64, vocab_size=97), seed=2, scale=0.1).eval()
    src, tgt = code_ids(2, 7) % 90 + 3, code_ids(2, 8, offset=200) % 90 + 3
    mask = torch.ones_like(src)
    mask[0, 5:] = 0
    assert_cached_decoding_matches(m, src, tgt, mask)


def test_translation_trains_and_translates():
    """AdamW without warm-up (lr 1e-2 from the first step, decaying linearly) on four fixed sentence pairs (target:
    the source reversed and shifted): the loss falls far, and greedy and beam decoding then produce the learned
    translations."""
    torch.manual_seed(0)
    m = translation(n=2, m=3, d_model=32, d_ff=64, vocab_size=97)
    src = code_ids(4, 8) % 90 + 3
    # the decay lets a norm-free model settle on so tiny a batch (at a constant 1e-2 its loss spikes now and then)
    losses, labels = train_reversal_pairs(m, src, steps=60, decay=True)
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.05 * losses[0], losses  # measured over seeds 0-5: 0.0004 to 0.008 of the first loss
    assert_translates(m, src, labels)


def _update_slope(block, depths=(2, 16)):
    """The log-log slope against depth of the logits' change after a first Adam step (DeepNet's probe), at
    init="xavier" (fairseq's, the official code's), mean of two seeds."""
    ids = code_ids(8, 64, offset=500) % V
    updates = []
    for L in depths:
        runs = []
        for seed in range(2):
            torch.manual_seed(seed)
            cfg = small_cfg(block, n_layers=L, d_model=64, d_ff=256, vocab_size=V, max_seq_len=64, init="xavier")
            model = build_model(cfg)
            runs.append(probe_batch(model, ids, ids)["model_update"])
        updates.append(sum(runs) / len(runs))
    return math.log(updates[1] / updates[0]) / math.log(depths[1] / depths[0])


def test_the_update_grows_far_slower_with_depth_than_post_lns():
    """The paper's claim (its Adam update is Theta(eta) in depth) as the probes carry it: a flat reference, and a
    first step's output change that grows far less from 2 to 16 blocks than Post-LN's (measured: slopes about
    0.31 against 0.80 at init="xavier")."""
    assert "T-Fixup" in REGISTRY["t-fixup"].predictions.bounded_update_source
    assert _update_slope("t-fixup") < _update_slope("post-ln") - 0.3
