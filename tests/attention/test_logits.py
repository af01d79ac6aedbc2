"""QK-clip's side of the attention (attention/logits.py): each head's largest logit over a batch, taken from
the queries and keys the softmax reads, and the scaling of a head's W^Q and W^K rows."""

import math

import pytest
import torch

import blocklab.attention.logits as logits
from blocklab.attention import MultiHeadAttention
from blocklab.attention.logits import head_max_logits
from tests.helpers import small_cfg


def reference_max(q, k, causal, key_mask=None):
    """Per head, the largest entry of Q K^T / sqrt(d_h) that the mask leaves, in float64, written out."""
    B, H, T, dh = q.shape
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(dh)
    ok = torch.ones(B, 1, T, T, dtype=torch.bool)
    if causal:
        ok = ok & torch.ones(T, T, dtype=torch.bool).tril()
    if key_mask is not None:
        ok = ok & key_mask[:, None, None, :]
    return scores.masked_fill(~ok, -math.inf).amax(dim=(0, 2, 3))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_head_maxima_are_the_largest_allowed_logits(causal, padded, monkeypatch):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 3, 7, 4, generator=g), torch.randn(5, 3, 7, 4, generator=g)
    mask = None
    if padded:
        mask = torch.ones(5, 7, dtype=torch.bool)
        mask[1, 4:] = False
        k[1, :, 4:] = 100.0  # padded keys with huge logits: they must not count
    if causal:
        k[:, :, -1] = 100.0  # so must the future: only the last query sees the last key
    want = reference_max(q, k, causal, mask)
    torch.testing.assert_close(head_max_logits(q, k, causal, mask).double(), want, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(logits, "CHUNK", 3 * 7 * 7)  # one batch row a piece: the same maxima
    torch.testing.assert_close(head_max_logits(q, k, causal, mask).double(), want, rtol=1e-6, atol=1e-6)


def test_the_module_keeps_its_maxima_only_while_tracking_and_training():
    attn = MultiHeadAttention(small_cfg("pre-ln", bias=True))
    x = torch.randn(2, 6, 32)
    attn(x)
    assert attn.max_logits is None  # QK-clip off: nothing kept, no product computed
    attn.track_logits()
    attn.eval()
    attn(x)
    assert attn.max_logits is None  # evaluation never counts
    attn.train()
    attn(x[:1])
    attn(x[1:])  # two micro-batches: the larger of each head's two maxima
    q, k = attn.queries(x), attn.keys_values(x)[0]
    torch.testing.assert_close(attn.take_max_logits(), reference_max(q, k, True).float(), rtol=1e-5, atol=1e-6)
    assert attn.max_logits is None and attn.take_max_logits().tolist() == [-math.inf] * 4


def test_scaling_a_head_scales_its_logits_and_leaves_the_others_bit_for_bit():
    attn = MultiHeadAttention(small_cfg("pre-ln", bias=True))
    with torch.no_grad():
        for p in attn.parameters():
            p.add_(torch.randn(p.shape) * 0.1)  # biases too: they scale with their head's rows
    x = torch.randn(2, 6, 32)
    q0, k0 = attn.queries(x), attn.keys_values(x)[0]
    before = {n: p.clone() for n, p in attn.named_parameters()}
    attn.scale_logits(torch.tensor([1.0, 0.25, 1.0, 0.5]))
    q1, k1 = attn.queries(x), attn.keys_values(x)[0]
    logits0, logits1 = q0 @ k0.transpose(-1, -2), q1 @ k1.transpose(-1, -2)
    for h, f in enumerate((1.0, 0.25, 1.0, 0.5)):
        torch.testing.assert_close(logits1[:, h], f * logits0[:, h], rtol=1e-5, atol=1e-6)
    rows = {0: slice(0, 8), 2: slice(16, 24)}  # heads 0 and 2 (d_h 8): factor 1
    for name, p in attn.named_parameters():
        if name.startswith(("q.", "k.")):
            for r in rows.values():
                assert torch.equal(p[r], before[name][r]), name
            assert not torch.equal(p[8:16], before[name][8:16]), name
        else:
            assert torch.equal(p, before[name]), name  # W^V, W^O untouched
