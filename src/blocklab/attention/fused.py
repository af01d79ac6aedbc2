"""Shaped attention as one Triton kernel, forward and backward (`attn_impl="fused"`).

Per head: out_h = alpha_h V_h + beta_h softmax(mask(Q_h K_h^T / sqrt(d_h))) V_h - gamma_h C V_h.

The reference it must equal is the materialised formula in `modules.ShapedAttention`
(`attn_impl="materialized"`); the two-call path is `functional.softmax_attention` plus
`centring.centred_mean`. Flash-style, the T x T matrix never exists: the forward visits each
key block once and accumulates, in the same loop, the online softmax (A V) and the masked key
sum whose mean is C V. The backward recomputes the probabilities from the saved log-sum-exp,
as flash attention does; C^T dO, the centring term's gradient, is the same masked sum taken
over queries, weighted by 1/count. The per-head gain gradients are three O(T d) reductions.
"""
from __future__ import annotations

import math
import os

import torch

from blocklab.errors import ConfigError

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton still have sdpa and materialized
    triton = None

BLOCK_M = 32
BLOCK_N = 32


def unavailable_reason(device: torch.device) -> str | None:
    """None when the fused kernel can run on `device`, else why not (one line for the user)."""
    if triton is None:
        return "attn_impl='fused' needs the triton package (pip install triton); use 'sdpa' on this machine"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return (f"attn_impl='fused' is a CUDA kernel but the model is on {device.type}; use 'sdpa' "
                "(or set TRITON_INTERPRET=1 to run the kernel slowly through Triton's interpreter)")
    return None


if triton is not None:

    @triton.jit
    def _valid(offs_m, offs_n, b, KM, T, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr):
        """(M, N) booleans: query row offs_m may attend key offs_n (inside T, causal, not padding)."""
        ok = (offs_m[:, None] < T) & (offs_n[None, :] < T)
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        if HAS_MASK:
            km = tl.load(KM + b * T + offs_n, mask=offs_n < T, other=0)
            ok = ok & (km[None, :] != 0)
        return ok

    @triton.jit
    def _tile(X, base, offs, offs_d, T, D):
        """Rows `offs` of one (T, D) head, zeros outside it."""
        mask = (offs[:, None] < T) & (offs_d[None, :] < D)
        return tl.load(X + base + offs[:, None] * D + offs_d[None, :], mask=mask, other=0.0)

    @triton.jit
    def _probs_and_ds(q, k, v, do, lse, delta, ok, beta, scale):
        """The recomputed probabilities P and dS = P (beta dO V^T - delta) of one (query, key) tile."""
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        p = tl.where(ok, tl.exp(s - lse[:, None]), 0.0)
        dp = beta * tl.dot(do, tl.trans(v), input_precision="ieee")
        return p, p * (dp - delta[:, None])

    @triton.jit
    def _fwd(Q, K, V, KM, GA, GB, GC, OUT, ATT, CV, LSE, CNT, H, T, D, scale,
             CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h, base = bh // H, bh % H, bh.to(tl.int64) * T * D
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        rows = (offs_m[:, None] < T) & (offs_d[None, :] < D)
        q = _tile(Q, base, offs_m, offs_d, T, D)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, BD], tl.float32)
        vsum = tl.zeros([BM, BD], tl.float32)
        cnt = tl.zeros([BM], tl.float32)
        hi = tl.minimum(T, (pid_m + 1) * BM) if CAUSAL else T
        for start_n in range(0, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k, v = _tile(K, base, offs_n, offs_d, T, D), _tile(V, base, offs_n, offs_d, T, D)
            ok = _valid(offs_m, offs_n, b, KM, T, CAUSAL, HAS_MASK)
            s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: keep zeros
            p = tl.exp(s - m_ref[:, None])
            corr = tl.exp(m_i - m_ref)
            l_i = l_i * corr + tl.sum(p, 1)
            acc = acc * corr[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            m_i = m_new
            if HAS_GAMMA:
                w = ok.to(v.dtype)
                vsum += tl.dot(w, v, input_precision="ieee")
                cnt += tl.sum(ok.to(tl.float32), 1)
        att = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out = tl.load(GA + h) * _tile(V, base, offs_m, offs_d, T, D)
        out += tl.load(GB + h) * att
        ptrs = base + offs_m[:, None] * D + offs_d[None, :]
        if HAS_GAMMA:
            cv = vsum / tl.maximum(cnt, 1.0)[:, None]
            out -= tl.load(GC + h) * cv
            tl.store(CV + ptrs, cv.to(CV.dtype.element_ty), mask=rows)
            tl.store(CNT + bh * T + offs_m, cnt, mask=offs_m < T)
        tl.store(OUT + ptrs, out.to(OUT.dtype.element_ty), mask=rows)
        tl.store(ATT + ptrs, att.to(ATT.dtype.element_ty), mask=rows)
        # +inf for a row that saw no key: the backward's exp(s - lse) is then 0, not NaN.
        lse = tl.where(l_i > 0, m_i + tl.log(tl.where(l_i > 0, l_i, 1.0)), float("inf"))
        tl.store(LSE + bh * T + offs_m, lse, mask=offs_m < T)

    @triton.jit
    def _bwd_kv(Q, K, V, KM, DO, LSE, DELTA, CNT, GA, GB, GC, DK, DV, H, T, D, scale,
                CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
        """dK and dV for one key block, looping over the query blocks that can see it."""
        pid_n, bh = tl.program_id(0), tl.program_id(1)
        b, h, base = bh // H, bh % H, bh.to(tl.int64) * T * D
        beta = tl.load(GB + h)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_d = tl.arange(0, BD)
        cols = (offs_n[:, None] < T) & (offs_d[None, :] < D)
        k, v = _tile(K, base, offs_n, offs_d, T, D), _tile(V, base, offs_n, offs_d, T, D)
        dk = tl.zeros([BN, BD], tl.float32)
        dv = tl.zeros([BN, BD], tl.float32)
        dv_c = tl.zeros([BN, BD], tl.float32)
        lo = (pid_n * BN // BM) * BM if CAUSAL else 0
        for start_m in range(lo, T, BM):
            offs_m = start_m + tl.arange(0, BM)
            q, do = _tile(Q, base, offs_m, offs_d, T, D), _tile(DO, base, offs_m, offs_d, T, D)
            lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
            delta = tl.load(DELTA + bh * T + offs_m, mask=offs_m < T, other=0.0)
            ok = _valid(offs_m, offs_n, b, KM, T, CAUSAL, HAS_MASK)
            p, ds = _probs_and_ds(q, k, v, do, lse, delta, ok, beta, scale)
            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision="ieee")
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision="ieee")
            if HAS_GAMMA:
                cnt = tl.load(CNT + bh * T + offs_m, mask=offs_m < T, other=1.0)
                c = tl.where(ok, 1.0 / tl.maximum(cnt, 1.0)[:, None], 0.0)
                dv_c += tl.dot(tl.trans(c).to(do.dtype), do, input_precision="ieee")
        # The identity term alpha V: key row j's own output row j.
        do_n = _tile(DO, base, offs_n, offs_d, T, D)
        dv = beta * dv + tl.load(GA + h) * do_n.to(tl.float32)
        if HAS_GAMMA:
            dv -= tl.load(GC + h) * dv_c
        ptrs = base + offs_n[:, None] * D + offs_d[None, :]
        tl.store(DK + ptrs, (dk * scale).to(DK.dtype.element_ty), mask=cols)
        tl.store(DV + ptrs, dv.to(DV.dtype.element_ty), mask=cols)

    @triton.jit
    def _bwd_q(Q, K, V, KM, DO, LSE, DELTA, GB, DQ, H, T, D, scale,
               CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
        """dQ for one query block, looping over the key blocks it can see."""
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h, base = bh // H, bh % H, bh.to(tl.int64) * T * D
        beta = tl.load(GB + h)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        rows = (offs_m[:, None] < T) & (offs_d[None, :] < D)
        q, do = _tile(Q, base, offs_m, offs_d, T, D), _tile(DO, base, offs_m, offs_d, T, D)
        lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
        delta = tl.load(DELTA + bh * T + offs_m, mask=offs_m < T, other=0.0)
        dq = tl.zeros([BM, BD], tl.float32)
        hi = tl.minimum(T, (pid_m + 1) * BM) if CAUSAL else T
        for start_n in range(0, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k, v = _tile(K, base, offs_n, offs_d, T, D), _tile(V, base, offs_n, offs_d, T, D)
            ok = _valid(offs_m, offs_n, b, KM, T, CAUSAL, HAS_MASK)
            _, ds = _probs_and_ds(q, k, v, do, lse, delta, ok, beta, scale)
            dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
        tl.store(DQ + base + offs_m[:, None] * D + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=rows)


def _launch_args(q: torch.Tensor):
    B, H, T, D = q.shape
    return B, H, T, D, max(16, triton.next_power_of_2(D)), 1.0 / math.sqrt(D)


class _FusedShapedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, alpha, beta, gamma, causal, key_mask):
        B, H, T, D, BD, scale = _launch_args(q)
        has_gamma, has_mask = gamma is not None, key_mask is not None
        km = key_mask.to(torch.int32).contiguous() if has_mask else q.new_zeros(1, dtype=torch.int32)
        ga, gb = alpha.float().contiguous(), beta.float().contiguous()
        gc = gamma.float().contiguous() if has_gamma else ga
        out, att = torch.empty_like(q), torch.empty_like(q)
        cv = torch.empty_like(q) if has_gamma else q.new_empty(1)
        lse = q.new_empty(B, H, T, dtype=torch.float32)
        cnt = q.new_empty(B, H, T, dtype=torch.float32) if has_gamma else lse.new_empty(1)
        grid = (triton.cdiv(T, BLOCK_M), B * H)
        _fwd[grid](q, k, v, km, ga, gb, gc, out, att, cv, lse, cnt, H, T, D, scale,
                   CAUSAL=causal, HAS_MASK=has_mask, HAS_GAMMA=has_gamma, BM=BLOCK_M, BN=BLOCK_N, BD=BD)
        ctx.save_for_backward(q, k, v, km, ga, gb, gc, att, cv, lse, cnt)
        ctx.flags = (causal, has_mask, has_gamma)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, km, ga, gb, gc, att, cv, lse, cnt = ctx.saved_tensors
        causal, has_mask, has_gamma = ctx.flags
        B, H, T, D, BD, scale = _launch_args(q)
        do = dout.contiguous().to(q.dtype)
        do32 = do.float()
        # Per-head gain gradients and flash attention's row term delta = <beta dO, A V>: O(T d).
        d_beta_rows = (do32 * att.float()).sum(-1)                      # (B, H, T)
        delta = (d_beta_rows * gb.view(1, H, 1)).contiguous()
        d_alpha = (do32 * v.float()).sum((0, 2, 3))
        d_beta = d_beta_rows.sum((0, 2))
        d_gamma = -(do32 * cv.float()).sum((0, 2, 3)) if has_gamma else None
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        common = dict(CAUSAL=causal, HAS_MASK=has_mask, BM=BLOCK_M, BN=BLOCK_N, BD=BD)
        _bwd_kv[(triton.cdiv(T, BLOCK_N), B * H)](q, k, v, km, do, lse, delta, cnt, ga, gb, gc, dk, dv,
                                                  H, T, D, scale, HAS_GAMMA=has_gamma, **common)
        _bwd_q[(triton.cdiv(T, BLOCK_M), B * H)](q, k, v, km, do, lse, delta, gb, dq, H, T, D, scale, **common)
        return dq, dk, dv, d_alpha, d_beta, d_gamma, None, None


def fused_shaped_attention(q, k, v, alpha, beta, gamma, causal: bool, key_mask=None) -> torch.Tensor:
    """(alpha_h I + beta_h A_h - gamma_h C) V_h for (B, H, T, d_h) inputs and (H,) gains; gamma may be None."""
    reason = unavailable_reason(q.device)
    if reason is not None:
        raise ConfigError(reason)
    dtype = q.dtype  # under autocast q, k are bf16 while V = Norm(x) may still be fp32
    q, k, v = (t.to(dtype).contiguous() for t in (q, k, v))
    return _FusedShapedAttention.apply(q, k, v, alpha, beta, gamma, causal, key_mask)
