"""The centring matrix C: attention at zero logits, uniform over the keys a row may see.

Causal: C[i, j] = 1/(i+1) for j <= i. Bidirectional: 1/T. With padding: uniform over
non-pad keys. `centred_mean` computes C @ V without forming C (O(T d) memory).
"""

from __future__ import annotations

import torch


def allowed(T: int, causal: bool, key_mask: torch.Tensor | None, device=None) -> torch.Tensor:
    """Boolean (B|1, 1, T, T): True where query i may attend key j."""
    ok = torch.ones(T, T, dtype=torch.bool, device=device)
    if causal:
        ok = ok.tril()
    ok = ok[None, None]
    if key_mask is not None:
        ok = ok & key_mask[:, None, None, :].bool()
    return ok


def centring_matrix(T: int, causal: bool, key_mask: torch.Tensor | None = None, device=None, dtype=torch.float32):
    """C as a dense (B|1, 1, T, T) matrix: the reference that `centred_mean` must equal."""
    m = allowed(T, causal, key_mask, device).to(dtype)
    return m / m.sum(-1, keepdim=True).clamp_min(1)


def centred_mean(v: torch.Tensor, causal: bool, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """C @ v for v of shape (B, H, T, d_h): a running mean (causal) or a masked mean."""
    dtype, T = v.dtype, v.shape[-2]
    if v.dtype in (torch.float16, torch.bfloat16):
        v = v.float()  # a running sum in bf16 loses the mean after a few hundred tokens
    if key_mask is not None:
        w = key_mask[:, None, :, None].to(v.dtype)
        v = v * w
    if causal:
        num = v.cumsum(-2)
        den = w.cumsum(-2) if key_mask is not None else torch.arange(1, T + 1, device=v.device, dtype=v.dtype)[:, None]
    else:
        num = v.sum(-2, keepdim=True)
        den = w.sum(-2, keepdim=True) if key_mask is not None else torch.tensor(float(T), device=v.device)
    return (num / den.clamp_min(1)).expand_as(v).to(dtype)
