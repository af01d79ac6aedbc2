"""Softmax attention, two ways: the fused SDPA kernel (default) and the explicit T x T matrix (reference)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from blocklab.attention.centring import allowed


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, T, dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * dh)


def allowed_keys(q_len: int, k_len: int, causal: bool, key_mask=None, device=None) -> torch.Tensor:
    """Boolean (B|1, 1, Tq, Tk): True where query i may attend key j. With fewer queries than keys
    (incremental decoding, a cross-attention) the queries are the last Tq positions: causal query i sees
    keys j <= Tk - Tq + i. `key_mask` (B, Tk): True (1) at real keys, False (0) at padding."""
    if q_len == k_len:
        return allowed(q_len, causal, key_mask, device)
    ok = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if causal:
        ok = ok.tril(k_len - q_len)
    ok = ok[None, None]
    if key_mask is not None:
        ok = ok & key_mask[:, None, None, :].bool()
    return ok


def attention_matrix(q, k, causal: bool, key_mask=None) -> torch.Tensor:
    """A = softmax(mask(Q K^T / sqrt(d_h))), shape (B, H, Tq, Tk) (Tq = Tk for self-attention)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed_keys(q.shape[-2], k.shape[-2], causal, key_mask, q.device), float("-inf"))
    return scores.softmax(-1)


def softmax_attention(q, k, v, causal: bool, key_mask=None, impl: str = "sdpa") -> torch.Tensor:
    """A(X) V for (B, H, Tq, d_h) queries and (B, H, Tk, d_h) keys and values; `impl="sdpa"` never forms
    the Tq x Tk matrix when unmasked. Self-attention has Tq = Tk; a cross-attention or a decoding step with
    cached keys has Tq != Tk, its queries then being the last Tq positions (`allowed_keys`). `key_mask`
    (B, Tk) marks the real keys."""
    if causal and q.shape[-2] == 1 < k.shape[-2]:
        causal = False  # one query, the newest position (a decoding step): it sees every key
    if impl == "materialized":
        return attention_matrix(q, k, causal, key_mask) @ v
    dtype = v.dtype
    upcast = q.device.type == "cpu" and torch.bfloat16 in (q.dtype, k.dtype, v.dtype)
    if upcast:
        # The CPU flash kernel's bf16 backward is 3-4x slower than its fp32 one (memory stays O(T)).
        # Autocast would cast the inputs straight back to bf16, so it is off for this call.
        q, k, v = q.float(), k.float(), v.float()
    elif len({q.dtype, k.dtype, v.dtype}) > 1:
        # SDPA takes one dtype (CUDA raises on mixed ones): compute in their promotion, as the matmuls would.
        common = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
        q, k, v = q.to(common), k.to(common), v.to(common)
    mask = None
    if key_mask is not None:
        mask = (
            allowed_keys(q.shape[-2], k.shape[-2], causal, key_mask, q.device)
            if causal
            else key_mask[:, None, None, :].bool()
        )
    elif causal and q.shape[-2] != k.shape[-2]:
        mask = allowed_keys(q.shape[-2], k.shape[-2], causal, None, q.device)  # SDPA's is_causal aligns top-left
    with torch.autocast("cpu", enabled=False) if upcast else contextlib.nullcontext():
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.to(dtype)
