"""DeepNorm in the encoder-decoder (task="translation"; DeepNet Table 1, SPEC section 2b): the encoder's and the
decoder's own alpha and beta, the Xavier-normal gains of both attentions and the MLP, the blocks' equations,
and a model that trains and translates."""

import inspect
import json.decoder
import math

import pytest
import torch
import torch.nn as nn

from blocklab import build_model
from blocklab.blocks.deepnorm import DeepNorm, DeepNormDecoderBlock
from blocklab.tokens import EOS_ID
from tests.helpers import assert_cached_decoding_matches, randomize, small_cfg

N, M, D, FF = 4, 2, 128, 384  # N != M, and (3M, 2N) distinct: a swapped or decoder-only formula cannot pass


def enc_constants(n, m):
    return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)


def dec_constants(m):
    return (3 * m) ** 0.25, (12 * m) ** -0.25


def deepnorm_translation(n=N, m=M, **kw):
    base = dict(d_model=D, n_layers=n, d_ff=FF, max_seq_len=32)
    if m is not None:
        base["n_decoder_layers"] = m
    base.update(kw)
    return build_model(small_cfg("deepnorm", "translation", **base))


def code_ids(B, T, offset=0):
    """Real-looking ids 3..92 (clear of <pad>, <mask>, <eod>): Python source, one byte per token."""
    src = inspect.getsource(json.decoder).encode()
    ids = [b - 32 if 32 <= b < 127 else 95 for b in src if b != 13][offset : offset + B * T]
    return torch.tensor(ids, dtype=torch.long).view(B, T) % 90 + 3


def _std_kurtosis(lins):
    w = torch.cat([lin.weight.detach().flatten() for lin in lins]).double()
    std = w.std().item()
    return std, ((w - w.mean()) ** 4).mean().item() / std**4


def _check_gain(lins, gain, what):
    fan_out, fan_in = lins[0].weight.shape
    std, kurt = _std_kurtosis(lins)
    assert std == pytest.approx(gain * math.sqrt(2 / (fan_in + fan_out)), rel=0.03), what
    assert kurt == pytest.approx(3.0, abs=0.25), what  # Xavier-normal, not uniform


@pytest.mark.parametrize("init", ["normal", "xavier"])
def test_encoder_and_decoder_constants_and_gains(init):
    m = deepnorm_translation(init=init)
    assert len(m.blocks) == N and len(m.decoder_blocks) == M
    ea, eb = enc_constants(N, M)
    da, db = dec_constants(M)
    # sanity: the four constants are distinct from each other and from the decoder-only (2N, 8N) formula
    assert len({round(x, 6) for x in (ea, da, (2 * N) ** 0.25)}) == 3
    assert len({round(x, 6) for x in (eb, db, (8 * N) ** -0.25)}) == 3
    for b in m.blocks:
        assert isinstance(b, DeepNorm) and b.alpha == pytest.approx(ea, rel=1e-12)
    for b in m.decoder_blocks:
        assert isinstance(b, DeepNormDecoderBlock) and b.alpha == pytest.approx(da, rel=1e-12)
    enc, dec = m.blocks, m.decoder_blocks
    _check_gain([b.attn.q for b in enc] + [b.attn.k for b in enc], 1.0, "encoder q, k")
    for name in ("v", "proj"):
        _check_gain([getattr(b.attn, name) for b in enc], eb, f"encoder {name}")
    for name in ("fc1", "fc2"):
        _check_gain([getattr(b.mlp, name) for b in enc], eb, f"encoder {name}")
    for attn in ("self_attn", "cross_attn"):
        _check_gain([getattr(b, attn).q for b in dec] + [getattr(b, attn).k for b in dec], 1.0, f"{attn} q, k")
        for name in ("v", "proj"):  # the cross-attention's value and output projections are scaled too
            _check_gain([getattr(getattr(b, attn), name) for b in dec], db, f"decoder {attn}.{name}")
    for name in ("fc1", "fc2"):
        _check_gain([getattr(b.mlp, name) for b in dec], db, f"decoder {name}")
    # Post-LN's layout: no final norm on either stack
    assert isinstance(m.encoder_norm, nn.Identity) and isinstance(m.decoder_norm, nn.Identity)


def test_default_decoder_depth_is_n_layers():
    m = deepnorm_translation(n=3, m=None, d_model=32, d_ff=64)
    assert len(m.decoder_blocks) == 3
    assert m.blocks[0].alpha == pytest.approx(enc_constants(3, 3)[0])
    assert m.decoder_blocks[0].alpha == pytest.approx(dec_constants(3)[0])


def test_constants_follow_depths():
    for n, mm in ((1, 1), (6, 6), (12, 3), (2, 18)):
        m = deepnorm_translation(n=n, m=mm, d_model=32, d_ff=64)
        assert m.blocks[-1].alpha == pytest.approx(enc_constants(n, mm)[0])
        assert m.decoder_blocks[-1].alpha == pytest.approx(dec_constants(mm)[0])


def test_blocks_compute_ln_of_alpha_x_plus_sublayer():
    """Encoder: u = LN(a x + SA(x)); y = LN(a u + MLP(u)). Decoder: u = LN(a x + SA(x)),
    v = LN(a u + CA(u, m)), y = LN(a v + MLP(v)), each with its own alpha."""
    m = randomize(deepnorm_translation(d_model=32, d_ff=64), seed=1, scale=0.2)
    x, mem = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    ea, da = enc_constants(N, M)[0], dec_constants(M)[0]
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, 3:] = False
    for b in m.blocks:
        u = b.norms[0](ea * mem + b.attn(mem, key_mask))
        torch.testing.assert_close(b(mem, key_mask), b.norms[1](ea * u + b.mlp(u)))
    for b in m.decoder_blocks:
        u = b.norms[0](da * x + b.self_attn(x))  # causal self-attention
        v = b.norms[1](da * u + b.cross_attn(u, key_mask, memory=mem))
        want = b.norms[2](da * v + b.mlp(v))
        got = b(x, b.cross_attn.keys_values(mem), key_mask)
        torch.testing.assert_close(got, want)
        assert not torch.allclose(b.norms[2](v + b.mlp(v)), want, atol=1e-3)  # alpha is used


def test_cached_decoding_equals_the_full_forward():
    m = randomize(deepnorm_translation(d_model=32, d_ff=64), seed=2, scale=0.2).eval()
    src, tgt = code_ids(2, 7), code_ids(2, 8, offset=200)
    mask = torch.ones_like(src)
    mask[0, 5:] = 0
    assert_cached_decoding_matches(m, src, tgt, mask)


def test_deepnorm_translation_trains_and_translates():
    """A few AdamW steps on four fixed sentence pairs (target: the source reversed and shifted): the loss
    falls far, and greedy and beam decoding then produce the learned translations."""
    torch.manual_seed(0)
    m = deepnorm_translation(n=2, m=3, d_model=32, d_ff=64)
    src = code_ids(4, 8)
    tgt = torch.flip((src + 7 - 3) % 90 + 3, [1])
    labels = torch.cat([tgt, torch.full((4, 1), EOS_ID)], 1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.0)
    losses = []
    for _ in range(40):
        loss = m(src, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.2 * losses[0], losses  # measured: 4.56 -> 0.01
    for beams in (1, 3):
        out = m.generate(src, max_new_tokens=12, num_beams=beams)
        assert out.dtype == torch.long and out.shape[0] == 4 and out.shape[1] <= 13
        assert (out[:, 0] == EOS_ID).all()
        assert torch.equal(out[:, 1 : 1 + labels.shape[1]], labels), (beams, out)
