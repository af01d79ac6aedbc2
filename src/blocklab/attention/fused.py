"""`attn_impl="fused"`: shaped attention as one `torch.library` op with its autograd.

out_h = (alpha_h I + beta_h A_h - gamma_h C) V_h, computed by the Triton kernels of
`fused_kernels.py` (FlashAttention-2 style; see there for the algorithm). The op reads the
(B, H, T, d_h) views that `split_heads` makes in place (any strides with a unit last stride) and
writes its output and gradients in the merged (B, T, H, d_h) layout, so neither side copies.

Besides the kernels, the launcher does the O(T d) preparation that is plain tensor algebra (kernel
v3): V cast once to the dots' dtype, and running sums over chunks of `fk.CHUNK` rows, of V's rows
(forward) and of the row pass's dO / count (backward), from which the kernels' epilogues form the
centring term C V and its gradient C^T dO as cumulative means.

On CUDA it is a `triton_op`: torch.compile sees the kernels, traces a block with
`fullgraph=True` and no graph break, and autotunes them with the rest of the graph. Under Triton's
CPU interpreter (tests) the same function is an opaque `custom_op` with a fake implementation,
because dynamo would otherwise trace into the interpreted kernels with fake tensors.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor
from torch.library import wrap_triton

from blocklab.attention import fused_kernels as fk
from blocklab.attention.fused_kernels import triton
from blocklab.errors import ConfigError


def unavailable_reason(device: torch.device) -> str | None:
    """None when the fused kernel can run on `device`, else why not (one line for the user)."""
    if triton is None:
        return "attn_impl='fused' needs the triton package (pip install triton); use 'sdpa' on this machine"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return (
            f"attn_impl='fused' is a CUDA kernel but the model is on {device.type}; use 'sdpa' "
            "(or set TRITON_INTERPRET=1 to run the kernel slowly through Triton's interpreter)"
        )
    return None


def _meta(q: Tensor, key_mask: Tensor | None) -> dict:
    B, H, T, D = q.shape
    sm_scale, qk_scale = fk.scales(D)
    return dict(
        B=B,
        H=H,
        T=T,
        D=D,
        BD=max(16, triton.next_power_of_2(D)),
        SM=sm_scale,
        QK=qk_scale,
        bucket=triton.next_power_of_2(T),
        skmb=0 if key_mask is None or key_mask.shape[0] == 1 else T,
    )


def _as_dot_operand(x: Tensor, like: Tensor) -> Tensor:
    """x in the dtype of the kernels' dots (q's): one O(T d) cast, so that the O(T^2) loops load 16-bit
    tiles where autocast hands over an fp32 V (Norm(x)) or the fp32 gradient of an fp32 output."""
    return x if x.dtype == like.dtype else x.to(like.dtype)


def _chunk_sums(v: Tensor, key_mask: Tensor | None) -> Tensor:
    """(B*H, NC, D) fp32, NC = ceil(T / CHUNK): the sums of V's unmasked rows over each chunk of CHUNK rows."""
    B, H, T, D = v.shape
    if key_mask is not None:
        v = v * key_mask[:, None, :, None].to(v.dtype)  # exact: a 0/1 factor
    n = T // fk.CHUNK * fk.CHUNK
    parts = []
    if n:
        parts.append(v[:, :, :n].unflatten(2, (n // fk.CHUNK, fk.CHUNK)).sum(3, dtype=torch.float32))
    if n < T:
        parts.append(v[:, :, n:].sum(2, keepdim=True, dtype=torch.float32))
    return (torch.cat(parts, 2) if len(parts) > 1 else parts[0]).reshape(B * H, -1, D)


def _running_sums(chunks: Tensor) -> Tensor:
    """(B*H, NC, D) chunk sums -> (B*H, NC + 1, D): row r is the sum of the first r chunks (row 0 none, row
    NC all of them). Of V's chunks (forward): the rows before row r * CHUNK, to which `fwd` adds a query
    tile's own running sum (C V, causal), or all rows (row NC, bidirectional). Of the row pass's chunks of
    dO / count, which it stores last chunk first (backward): the rows from row (NC - r) * CHUNK on, to which
    `bwd_dkdv` adds a key tile's own reverse running sum (C^T dO, causal), or all rows (row NC)."""
    return torch.nn.functional.pad(chunks.cumsum(1), (0, 0, 1, 0)).contiguous()  # the kernels index it flat


def _forward_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    alpha: Tensor,
    beta: Tensor,
    gamma: Tensor | None,
    key_mask: Tensor | None,
    counts: Tensor | None,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    m = _meta(q, key_mask)
    B, H, T, D = m["B"], m["H"], m["T"], m["D"]
    # The sdpa path's dtype: alpha V is the residual stream, fp32 under autocast.
    out_dtype = torch.promote_types(torch.promote_types(alpha.dtype, v.dtype), q.dtype)
    out = q.new_empty(B, T, H, D, dtype=out_dtype)
    att = q.new_empty(B, T, H, D)
    lse = q.new_empty(B, H, T, dtype=torch.float32)
    km, cnt = (key_mask, counts) if key_mask is not None else (lse, lse)  # unread placeholders
    vq = _as_dot_operand(v, q)
    vsum = _running_sums(_chunk_sums(v, key_mask)) if gamma is not None else lse
    grid = lambda meta: (triton.cdiv(T, meta["BM"]), B * H)  # noqa: E731
    wrap_triton(fk.fwd)[grid](
        q,
        k,
        v,
        vq,
        vsum,
        km,
        cnt,
        alpha,
        beta,
        gamma if gamma is not None else alpha,
        out,
        att,
        lse,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *vq.stride()[:3],
        m["skmb"],
        H,
        T,
        m["bucket"],
        D=D,
        BD=m["BD"],
        QK_SCALE=m["QK"],
        CAUSAL=causal,
        HAS_MASK=key_mask is not None,
        HAS_GAMMA=gamma is not None,
    )
    return out.transpose(1, 2), att, lse


def _backward_impl(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    alpha: Tensor,
    beta: Tensor,
    gamma: Tensor | None,
    key_mask: Tensor | None,
    counts: Tensor | None,
    att: Tensor,
    lse: Tensor,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    m = _meta(q, key_mask)
    B, H, T, D = m["B"], m["H"], m["T"], m["D"]
    km, cnt = (key_mask, counts) if key_mask is not None else (lse, lse)
    flags = dict(CAUSAL=causal, HAS_MASK=key_mask is not None, HAS_GAMMA=gamma is not None)
    vq = _as_dot_operand(v, q)
    doq = dout  # dO in the dots' dtype, written by the row pass where it differs, with dO's strides
    if dout.dtype != q.dtype:
        doq = torch.empty_like(dout, dtype=q.dtype)
        if doq.stride() != dout.stride():  # dO not dense: give both one layout
            dout = dout.contiguous()
            doq = torch.empty_like(dout, dtype=q.dtype)
    n_rows = triton.cdiv(T, fk.ROW_TILE)
    delta = torch.empty_like(lse)
    d_beta = lse.new_empty(B * H, n_rows)
    g_parts = lse.new_empty(B * H, triton.cdiv(T, fk.CHUNK), D) if gamma is not None else lse
    wrap_triton(fk.bwd_rows)[(n_rows, B * H)](
        dout,
        doq,
        att,
        km,
        cnt,
        beta,
        delta,
        d_beta,
        g_parts,
        *dout.stride()[:3],
        m["skmb"],
        H,
        T,
        n_rows,
        D=D,
        BD=m["BD"],
        BM=fk.ROW_TILE,
        **flags,
    )
    g_suffix = _running_sums(g_parts) if gamma is not None else lse
    # Per key row, every row written by whichever tile size runs (see bwd_dkdv): never stale.
    d_alpha = lse.new_empty(B * H, T)
    d_gamma = lse.new_zeros(B * H, T) if gamma is None else lse.new_empty(B * H, T)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    gc = gamma if gamma is not None else alpha
    wrap_triton(fk.bwd_dkdv)[lambda meta: (triton.cdiv(T, meta["BN"]), B * H)](
        q,
        k,
        v,
        vq,
        km,
        cnt,
        dout,
        doq,
        lse,
        delta,
        g_suffix,
        alpha,
        beta,
        gc,
        dk,
        dv,
        d_alpha,
        d_gamma,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *vq.stride()[:3],
        *dout.stride()[:3],
        m["skmb"],
        *dk.stride()[:3],
        *dv.stride()[:3],
        H,
        T,
        m["bucket"],
        D=D,
        BD=m["BD"],
        SM_SCALE=m["SM"],
        QK_SCALE=m["QK"],
        **flags,
    )
    wrap_triton(fk.bwd_dq)[lambda meta: (triton.cdiv(T, meta["BM"]), B * H)](
        q,
        k,
        vq,
        km,
        doq,
        lse,
        delta,
        beta,
        dq,
        *q.stride()[:3],
        *k.stride()[:3],
        *vq.stride()[:3],
        *doq.stride()[:3],
        m["skmb"],
        *dq.stride()[:3],
        H,
        T,
        m["bucket"],
        D=D,
        BD=m["BD"],
        SM_SCALE=m["SM"],
        QK_SCALE=m["QK"],
        **flags,
    )

    def per_head(part, like):
        return part.view(B, H, -1).sum((0, 2)).to(like.dtype)

    return dq, dk, dv, per_head(d_alpha, alpha), per_head(d_beta, beta), per_head(d_gamma, gc)


if triton is not None:
    _register = torch.library.custom_op if fk.INTERPRET else torch.library.triton_op
    _forward = _register("blocklab::shaped_attention", _forward_impl, mutates_args=())
    _backward = _register("blocklab::shaped_attention_backward", _backward_impl, mutates_args=())

    if fk.INTERPRET:

        @_forward.register_fake
        def _(q, k, v, alpha, beta, gamma, key_mask, counts, causal):
            B, H, T, D = q.shape
            out_dtype = torch.promote_types(torch.promote_types(alpha.dtype, v.dtype), q.dtype)
            return (
                q.new_empty(B, T, H, D, dtype=out_dtype).transpose(1, 2),
                q.new_empty(B, T, H, D),
                q.new_empty(B, H, T, dtype=torch.float32),
            )

        @_backward.register_fake
        def _(dout, q, k, v, alpha, beta, gamma, key_mask, counts, att, lse, causal):
            gc = gamma if gamma is not None else alpha
            return (
                torch.empty_like(q),
                torch.empty_like(k),
                torch.empty_like(v),
                torch.empty_like(alpha),
                torch.empty_like(beta),
                torch.empty_like(gc),
            )

    def _setup_context(ctx, inputs, output):
        q, k, v, alpha, beta, gamma, key_mask, counts, causal = inputs
        _, att, lse = output
        ctx.save_for_backward(q, k, v, alpha, beta, gamma, key_mask, counts, att, lse)
        ctx.causal = causal
        ctx.mark_non_differentiable(att, lse)

    def _grad(ctx, dout, _d_att, _d_lse):
        q, k, v, alpha, beta, gamma, key_mask, counts, att, lse = ctx.saved_tensors
        if dout.stride(-1) != 1:  # e.g. the expanded ones of out.sum().backward()
            dout = dout.contiguous()
        dq, dk, dv, da, db, dg = _backward(dout, q, k, v, alpha, beta, gamma, key_mask, counts, att, lse, ctx.causal)
        return dq, dk, dv, da, db, (dg if gamma is not None else None), None, None, None

    torch.library.register_autograd("blocklab::shaped_attention", _grad, setup_context=_setup_context)


def fused_shaped_attention(q, k, v, alpha, beta, gamma, causal: bool, key_mask=None) -> Tensor:
    """(alpha_h I + beta_h A_h - gamma_h C) V_h for (B, H, T, d_h) inputs and (H,) gains; gamma may be None.

    `key_mask` is None or (B, T) / (1, T), true at real tokens. Under autocast q and k may be bf16
    while V = Norm(x) is fp32: the dots run in q's dtype, alpha V and C V in V's, and the output has
    the dtype the sdpa path would return.
    """
    reason = unavailable_reason(q.device)
    if reason is not None:
        raise ConfigError(reason)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    counts = None
    if key_mask is not None:
        key_mask = key_mask.to(torch.int32).contiguous()
        # Keys each query row may see: C's denominators, O(T) and computed once per call.
        counts = key_mask.cumsum(-1) if causal else key_mask.sum(-1, keepdim=True).expand_as(key_mask)
        counts = counts.to(torch.float32).contiguous()
    return _forward(q, k, v, alpha, beta, gamma, key_mask, counts, causal)[0]
