"""Output projection + cross-entropy in chunks of tokens: the (N, V) fp32 logits never exist at once.

At the he-codeparrot shape the full logits are 128 x 128 x 50,000 fp32 = 3.3 GB, written,
log-softmaxed and read back in both passes. Here each chunk of rows is projected, reduced to
its loss, and turned at once into the gradients of the hidden states and of the (tied) head
weight (softmax - onehot), then dropped. Memory is O(chunk x V) instead of O(N x V), with the
same three matmuls as full logits.
"""

from __future__ import annotations

import torch

from blocklab.tokens import IGNORE_INDEX

CHUNK_ELEMENTS = 2**26  # logits per chunk: 256 MB in fp32, whatever the vocabulary


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run the projection in (custom Functions see autocast state)."""
    dev = h.device.type
    try:
        if torch.is_autocast_enabled(dev):
            return torch.get_autocast_dtype(dev)
    except RuntimeError:  # a device autocast does not know (meta, under FLOP counting)
        pass
    return h.dtype


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Forward computes, chunk by chunk, the loss and (when needed) its gradients: the loss is a
    scalar at the end of the graph, so the backward only scales them. Three matmuls per chunk, as
    with full logits, and no recomputation."""

    @staticmethod
    def forward(ctx, h, weight, labels, chunk, eps, grad_enabled):
        dtype = _compute_dtype(h)
        acc = torch.promote_types(dtype, torch.float32)  # fp32 logits for bf16, float64 stays float64
        w = weight.to(dtype)
        # needs_input_grad stays True under no_grad: evaluation must not pay for the gradients.
        need_h, need_w = (grad_enabled and ctx.needs_input_grad[i] for i in (0, 1))
        total = h.new_zeros((), dtype=acc)
        dh = torch.empty_like(h) if need_h else None
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        for s in range(0, h.shape[0], chunk):
            hc, y = h[s : s + chunk].to(dtype), labels[s : s + chunk]
            keep, target = y != IGNORE_INDEX, y.clamp_min(0)[:, None]
            # The chunk's own logits, worked on in place: shifted by their row maximum (a stable exp), turned
            # into exp, normalised into the softmax. Every pass over the (chunk, V) block costs as much as a
            # small model's matmuls, so none allocates a second one.
            logits = (hc @ w.t()).to(acc)
            logits -= logits.amax(-1, keepdim=True)
            at_label = logits.gather(1, target)[:, 0]
            mean = logits.mean(-1) if eps else None
            g = logits.exp_()
            z = g.sum(-1)
            log_z = z.log()  # logsumexp of the shifted logits
            nll = log_z - at_label
            if eps:
                nll = (1 - eps) * nll + eps * (log_z - mean)
            total += torch.where(keep, nll, 0.0).sum()  # no boolean indexing: no host sync on GPU
            if need_h or need_w:
                g /= z[:, None]  # d nll / d logits = softmax - (1-eps) onehot - eps/V
                g.scatter_add_(1, target, torch.full_like(g[:, :1], -(1 - eps)))
                if eps:
                    g -= eps / g.shape[1]
                g = (g.mul_(keep[:, None])).to(dtype)
                if need_h:
                    dh[s : s + chunk] = (g @ w).to(h.dtype)
                if need_w:
                    dw += (g.t() @ hc).to(acc)
        ctx.save_for_backward(dh if need_h else None, dw.to(weight.dtype) if need_w else None)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        dh, dw = ctx.saved_tensors
        return (
            dh * grad_total.to(dh.dtype) if dh is not None else None,
            dw * grad_total.to(dw.dtype) if dw is not None else None,
            None,
            None,
            None,
            None,
        )


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    chunk: int | None = None,
) -> torch.Tensor:
    """cross_entropy(hidden @ weight.T, labels, ignore_index=-100) for hidden (..., d), labels (...).

    `reduction` "sum" or "mean" (over non-ignored labels); equal to F.cross_entropy on the full
    fp32 logits to float rounding, with the same label smoothing.
    """
    h, y = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    chunk = chunk or max(64, CHUNK_ELEMENTS // weight.shape[0])
    total = _ChunkedCrossEntropy.apply(h, weight, y, chunk, float(label_smoothing), torch.is_grad_enabled())
    if reduction == "sum":
        return total
    return total / (y != IGNORE_INDEX).sum().clamp_min(1)
