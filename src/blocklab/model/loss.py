"""Output projection + cross-entropy in chunks of tokens: the (N, V) fp32 logits never exist at once.

At the he-codeparrot shape the full logits are 128 x 128 x 50,000 fp32 = 3.3 GB, written,
log-softmaxed and read back in both passes. Here each chunk of rows is projected, reduced to
its loss and log-sum-exp, and dropped; the backward projects the chunk again and turns
softmax - onehot into the gradients of the hidden states and of the (tied) head weight.
Memory is O(chunk x V) instead of O(N x V), at the cost of one extra chunk matmul.
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100
CHUNK_ELEMENTS = 2**26  # logits per chunk: 256 MB in fp32, whatever the vocabulary


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run the projection in (custom Functions see autocast state)."""
    dev = h.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return h.dtype


class _ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, labels, chunk, smoothing):
        dtype = _compute_dtype(h)
        acc = torch.promote_types(dtype, torch.float32)  # fp32 logits for bf16, float64 stays float64
        w = weight.to(dtype)
        total = h.new_zeros((), dtype=acc)
        lse = h.new_empty(h.shape[0], dtype=acc)
        for s in range(0, h.shape[0], chunk):
            logits = (h[s:s + chunk].to(dtype) @ w.t()).to(acc)
            y = labels[s:s + chunk]
            keep = y != IGNORE_INDEX
            lse[s:s + chunk] = torch.logsumexp(logits, -1)
            nll = lse[s:s + chunk] - logits.gather(1, y.clamp_min(0)[:, None])[:, 0]
            if smoothing:
                nll = (1 - smoothing) * nll + smoothing * (lse[s:s + chunk] - logits.mean(-1))
            total += nll[keep].sum()
        ctx.save_for_backward(h, weight, labels, lse)
        ctx.chunk, ctx.smoothing, ctx.dtype = chunk, smoothing, dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        h, weight, labels, lse = ctx.saved_tensors
        chunk, eps, dtype = ctx.chunk, ctx.smoothing, ctx.dtype
        w = weight.to(dtype)
        dh = torch.empty_like(h)
        dw = torch.zeros(weight.shape, dtype=lse.dtype, device=weight.device)
        for s in range(0, h.shape[0], chunk):
            hc = h[s:s + chunk].to(dtype)
            logits = (hc @ w.t()).to(lse.dtype)
            y = labels[s:s + chunk]
            keep = (y != IGNORE_INDEX).to(lse.dtype)[:, None]
            g = torch.exp(logits - lse[s:s + chunk, None])  # softmax
            g.scatter_add_(1, y.clamp_min(0)[:, None], torch.full_like(g[:, :1], -(1 - eps)))
            if eps:
                g -= eps / g.shape[1]
            g = (g * keep * grad_total).to(dtype)
            dh[s:s + chunk] = (g @ w).to(h.dtype)
            dw += (g.t() @ hc).to(dw.dtype)
        return dh, dw.to(weight.dtype), None, None, None


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                          reduction: str = "mean", label_smoothing: float = 0.0,
                          chunk: int | None = None) -> torch.Tensor:
    """cross_entropy(hidden @ weight.T, labels, ignore_index=-100) for hidden (..., d), labels (...).

    `reduction` "sum" or "mean" (over non-ignored labels); equal to F.cross_entropy on the full
    fp32 logits to float rounding, with the same label smoothing.
    """
    h, y = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    chunk = chunk or max(64, CHUNK_ELEMENTS // weight.shape[0])
    total = _ChunkedCrossEntropy.apply(h, weight, y, chunk, float(label_smoothing))
    if reduction == "sum":
        return total
    return total / (y != IGNORE_INDEX).sum().clamp_min(1)
