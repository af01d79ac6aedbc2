"""The chunked output projection + cross-entropy equals F.cross_entropy on the full fp32 logits."""

import pytest
import torch
import torch.nn.functional as F

from blocklab import build_model
from blocklab.model.loss import chunked_cross_entropy
from tests.helpers import randomize, small_cfg


def _case(dtype=torch.float64, N=50, d=12, V=37):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(N, d, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(V, d, generator=g, dtype=dtype, requires_grad=True)
    y = torch.randint(0, V, (N,), generator=g)
    y[::7] = -100
    return h, w, y


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk", [7, 16, 1000])  # uneven chunks, several chunks, one chunk
def test_equals_full_logits_loss_and_gradients(reduction, smoothing, chunk):
    h, w, y = _case()
    got = chunked_cross_entropy(h, w, y, reduction, smoothing, chunk=chunk)
    want = F.cross_entropy(h @ w.t(), y, ignore_index=-100, reduction=reduction, label_smoothing=smoothing)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    g_got = torch.autograd.grad(got * 1.7, (h, w))
    g_want = torch.autograd.grad(want * 1.7, (h, w))
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert g_got[0][::7].abs().max() == 0  # ignored rows get no gradient


def test_bf16_autocast_close_to_fp32():
    h, w, y = _case(torch.float32, N=64, d=32, V=101)
    want = F.cross_entropy(h @ w.t(), y, ignore_index=-100)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = chunked_cross_entropy(h, w, y, chunk=16)
    assert abs(got.item() - want.item()) < 2e-2 * want.item()
    dh, dw = torch.autograd.grad(got, (h, w))
    assert dh.dtype == h.dtype and dw.dtype == w.dtype


@pytest.mark.parametrize("block,task", [("pre-ln", "clm"), ("sas-p", "mlm")])
def test_model_loss_without_logits_equals_loss_of_logits(block, task):
    model = randomize(build_model(small_cfg(block, task)), seed=1, scale=0.1).double()
    ids = torch.randint(0, 97, (3, 20))
    labels = torch.randint(0, 97, (3, 20))
    labels[:, ::3] = -100
    full = model(ids)
    want = F.cross_entropy(full.logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    out = model(ids, labels=labels, loss_reduction="sum", return_logits=False)
    assert out.logits is None
    torch.testing.assert_close(out.loss, want, rtol=1e-10, atol=1e-10)
