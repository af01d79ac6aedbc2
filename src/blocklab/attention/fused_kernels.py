"""Shaped attention as Triton kernels in the manner of FlashAttention-2 (`attn_impl="fused"`).

Per head: out_h = alpha_h V_h + beta_h softmax(mask(Q_h K_h^T / sqrt(d_h))) V_h - gamma_h C V_h.

The reference it must equal is the materialised formula in `modules.ShapedAttention`
(`attn_impl="materialized"`); the launcher, its `torch.library` op and autograd are in
`fused.py`. The T x T matrix never exists. The forward visits each key tile once with an
online softmax in base 2; only diagonal and boundary tiles build a mask. C V, an O(T d)
quantity, needs no matmul: every row sees all keys before its query tile (their column sum,
summed while the tile is in registers) plus a prefix of its own tile (a cumulative sum of the
query tile's own V rows). The backward is FA2's split: a row pass (delta = beta <dO, A V> and
d_beta), one kernel for dK and dV over key tiles, one for dQ over query tiles. C^T dO, the
centring gradient, is the mirror image: column sums of dO / count from the query tiles after
the key tile plus a reverse cumulative sum over the key tile's own rows; d_alpha and d_gamma
are folded into the dK/dV kernel as per-row partial sums.

A query row that sees no key (all its keys padded) gets a zero attention row and a zero
centring row, never NaN: its log-sum-exp is stored as +inf so the backward's p is 0.
"""

from __future__ import annotations

import math
import os

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton still have sdpa and materialized
    triton = None

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
LOG2E = 1.4426950408889634


def scales(D: int) -> tuple[float, float]:
    """(1/sqrt(D), log2(e)/sqrt(D)): passed as compile-time constants, never as runtime floats
    (inductor would type a float argument fp64 and break the loop-carried fp32 state)."""
    return 1.0 / math.sqrt(D), LOG2E / math.sqrt(D)


def _configs(tiles):
    """Autotuned tile shapes. The interpreter gets one small tile pair so that short test sequences
    still cross every code path (full, diagonal and boundary tiles) in seconds.
    BLOCKLAB_FUSED_AUTOTUNE=0 keeps one GPU configuration per kernel: a sweep over many shapes then
    compiles three kernels per shape instead of every candidate of each."""
    if INTERPRET:
        tiles = tiles[:1]
    elif os.environ.get("BLOCKLAB_FUSED_AUTOTUNE") == "0":
        tiles = tiles[1:2]
    return [triton.Config({"BM": bm, "BN": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in tiles]


# (BM, BN, warps, stages). BM is a multiple of BN in the forward and dQ kernels (the causal
# unmasked region ends on a query tile boundary); BN a multiple of BM in the dK/dV kernel.
FWD_TILES = [(16, 16, 4, 1), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 32, 4, 4)]
DKDV_TILES = [(16, 32, 4, 1), (32, 64, 4, 3), (64, 64, 4, 3), (32, 128, 8, 3), (64, 128, 8, 3)]
DQ_TILES = [(32, 16, 4, 1), (64, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (128, 32, 4, 3)]
ROW_TILE = 64  # the row pass is memory-bound: one fixed tile
TUNE_KEY = ["T_BUCKET", "CAUSAL", "HAS_MASK", "HAS_GAMMA", "D"]

if triton is not None:

    @triton.jit
    def _rows(X, base, stride_t, offs, offs_d, T, D: tl.constexpr, BOUNDS: tl.constexpr):
        """Rows `offs` of one head (row stride `stride_t`, unit column stride), zeros outside it."""
        ptrs = X + base + offs[:, None] * stride_t + offs_d[None, :]
        if BOUNDS:
            return tl.load(ptrs, mask=(offs[:, None] < T) & (offs_d[None, :] < D), other=0.0)
        if offs_d.shape[0] != D:
            return tl.load(ptrs, mask=offs_d[None, :] < D, other=0.0)
        return tl.load(ptrs)

    @triton.jit
    def _count(CNT, cnt_base, offs, T, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr):
        """Keys row `offs` may see: the launcher's masked counts, else i + 1 (causal) or T."""
        if HAS_MASK:
            return tl.load(CNT + cnt_base + offs, mask=offs < T, other=1.0)
        if CAUSAL:
            return (offs + 1).to(tl.float32)
        return tl.zeros(offs.shape, tl.float32) + T

    # fmt: off
    @triton.jit
    def _fwd_keys(acc, l_i, m_i, vcols, q, K, V, KM, k_base, v_base, km_base, skt, svt,
                  offs_m, offs_d, lo, hi, T, QK_SCALE: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
                  HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr, MASKED: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        """Key tiles [lo, hi): online softmax into (acc, l_i, m_i) and the keys' V column sums."""
        for start_n in range(lo, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k = _rows(K, k_base, skt, offs_n, offs_d, T, D, MASKED)
            v = _rows(V, v_base, svt, offs_n, offs_d, T, D, MASKED)
            s = tl.dot(q, tl.trans(k.to(q.dtype))) * QK_SCALE
            if MASKED:
                ok = offs_n[None, :] < T
                if CAUSAL:
                    ok = ok & (offs_n[None, :] <= offs_m[:, None])
                s = tl.where(ok, s, float("-inf"))
            if HAS_MASK:
                km = tl.load(KM + km_base + offs_n, mask=offs_n < T, other=0) != 0
                s = tl.where(km[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            if MASKED or HAS_MASK:  # a row with no key yet keeps zeros instead of exp(-inf + inf)
                m_new_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
            else:
                m_new_ref = m_new
            p = tl.math.exp2(s - m_new_ref[:, None])
            corr = tl.math.exp2(m_i - m_new_ref)
            l_i = l_i * corr + tl.sum(p, 1)
            acc = acc * corr[:, None] + tl.dot(p.to(q.dtype), v.to(q.dtype))
            m_i = m_new
            # Causal diagonal tiles are the query tile's own rows: their prefix sums come later.
            if HAS_GAMMA and not (CAUSAL and MASKED):
                vf = v.to(tl.float32)
                if HAS_MASK:
                    vf = tl.where(km[:, None], vf, 0.0)
                vcols += vf
        return acc, l_i, m_i, vcols

    # fmt: off
    @triton.autotune(configs=_configs(FWD_TILES), key=TUNE_KEY)
    @triton.jit
    def fwd(Q, K, V, KM, CNT, GA, GB, GC, OUT, ATT, LSE,
             sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, skmb, H, T, T_BUCKET,
             D: tl.constexpr, BD: tl.constexpr, QK_SCALE: tl.constexpr, CAUSAL: tl.constexpr,
             HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_m = pid_m * BM
        offs_m = start_m + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        q_base = b.to(tl.int64) * sqb + h * sqh
        k_base = b.to(tl.int64) * skb + h * skh
        v_base = b.to(tl.int64) * svb + h * svh
        km_base = b.to(tl.int64) * skmb
        q = _rows(Q, q_base, sqt, offs_m, offs_d, T, D, True)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, BD], tl.float32)
        vcols = tl.zeros([BN, BD], tl.float32)
        if CAUSAL:  # keys before the query tile are all visible; the tile's own keys are the diagonal
            lo, hi = start_m, tl.minimum(start_m + BM, T)
        else:  # every full key tile is visible; only the last partial one needs a bound
            lo, hi = (T // BN) * BN, T
        acc, l_i, m_i, vcols = _fwd_keys(acc, l_i, m_i, vcols, q, K, V, KM, k_base, v_base, km_base, skt, svt,
                                         offs_m, offs_d, 0, lo, T, QK_SCALE, D, CAUSAL, HAS_MASK, HAS_GAMMA,
                                         False, BN)
        acc, l_i, m_i, vcols = _fwd_keys(acc, l_i, m_i, vcols, q, K, V, KM, k_base, v_base, km_base, skt, svt,
                                         offs_m, offs_d, lo, hi, T, QK_SCALE, D, CAUSAL, HAS_MASK, HAS_GAMMA,
                                         True, BN)
        att = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        v_own = _rows(V, v_base, svt, offs_m, offs_d, T, D, True).to(tl.float32)
        out = tl.load(GA + h) * v_own + tl.load(GB + h) * att
        if HAS_GAMMA:
            num = tl.sum(vcols, 0)[None, :]
            if CAUSAL:
                w = v_own
                if HAS_MASK:
                    km = tl.load(KM + km_base + offs_m, mask=offs_m < T, other=0) != 0
                    w = tl.where(km[:, None], w, 0.0)
                num = num + tl.cumsum(w, 0)
            cnt = _count(CNT, km_base, offs_m, T, CAUSAL, HAS_MASK)
            out -= tl.load(GC + h) * (num / tl.maximum(cnt, 1.0)[:, None])
        # OUT and ATT are (B, T, H, D) contiguous: the merged-heads layout, written in place.
        o_ptrs = (b.to(tl.int64) * T * H + h) * D + offs_m[:, None] * (H * D) + offs_d[None, :]
        rows = (offs_m[:, None] < T) & (offs_d[None, :] < D)
        tl.store(OUT + o_ptrs, out.to(OUT.dtype.element_ty), mask=rows)
        tl.store(ATT + o_ptrs, att.to(ATT.dtype.element_ty), mask=rows)
        lse = tl.where(l_i > 0, m_i + tl.math.log2(tl.where(l_i > 0, l_i, 1.0)), float("inf"))
        tl.store(LSE + bh.to(tl.int64) * T + offs_m, lse, mask=offs_m < T)

    # fmt: off
    @triton.jit
    def bwd_rows(DO, ATT, GB, DELTA, DBETA, sdob, sdoh, sdot, H, T, NT,
                  D: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr):
        # fmt: on
        """delta_i = beta <dO_i, (A V)_i> (flash attention's row term) and this tile's part of d_beta."""
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        do = _rows(DO, b.to(tl.int64) * sdob + h * sdoh, sdot, offs_m, offs_d, T, D, True).to(tl.float32)
        att = _rows(ATT, (b.to(tl.int64) * T * H + h) * D, H * D, offs_m, offs_d, T, D, True).to(tl.float32)
        r = tl.sum(do * att, 1)
        tl.store(DELTA + bh.to(tl.int64) * T + offs_m, tl.load(GB + h) * r, mask=offs_m < T)
        tl.store(DBETA + bh.to(tl.int64) * NT + pid_m, tl.sum(r, 0))

    # fmt: off
    @triton.jit
    def _dkdv_queries(dk, dv, gcols, k, v, Q, DO, LSE, DELTA, CNT, q_base, do_base, r_base, cnt_base,
                      sqt, sdot, beta, offs_n, offs_d, lo, hi, T, QK_SCALE: tl.constexpr, D: tl.constexpr,
                      CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
                      MASKED: tl.constexpr, DIAG: tl.constexpr, BM: tl.constexpr):
        # fmt: on
        """Query tiles [lo, hi) against one key tile, transposed (keys are rows): dK, dV, and the
        column sums of dO / count from the query tiles after the key tile (C^T dO)."""
        for start_m in range(lo, hi, BM):
            offs_m = start_m + tl.arange(0, BM)
            q = _rows(Q, q_base, sqt, offs_m, offs_d, T, D, MASKED)
            do = _rows(DO, do_base, sdot, offs_m, offs_d, T, D, MASKED)
            lse = tl.load(LSE + r_base + offs_m, mask=offs_m < T, other=float("inf"))
            delta = tl.load(DELTA + r_base + offs_m, mask=offs_m < T, other=0.0)
            p_t = tl.math.exp2(tl.dot(k, tl.trans(q.to(k.dtype))) * QK_SCALE - lse[None, :])
            if DIAG:
                p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
            do_k = do.to(k.dtype)
            dv += tl.dot(p_t.to(k.dtype), do_k)
            ds_t = p_t * (beta * tl.dot(v, tl.trans(do_k)) - delta[None, :])
            dk += tl.dot(ds_t.to(k.dtype), q.to(k.dtype))
            if HAS_GAMMA and not DIAG:  # the diagonal rows are summed after the loop
                cnt = _count(CNT, cnt_base, offs_m, T, CAUSAL, HAS_MASK)
                gcols += do.to(tl.float32) / tl.maximum(cnt, 1.0)[:, None]
        return dk, dv, gcols

    # fmt: off
    @triton.autotune(configs=_configs(DKDV_TILES), key=TUNE_KEY)
    @triton.jit
    def bwd_dkdv(Q, K, V, KM, CNT, DO, LSE, DELTA, GA, GB, GC, DK, DV, DALPHA, DGAMMA,
                  sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdob, sdoh, sdot, skmb,
                  sdkb, sdkh, sdkt, sdvb, sdvh, sdvt, H, T, T_BUCKET,
                  D: tl.constexpr, BD: tl.constexpr, SM_SCALE: tl.constexpr, QK_SCALE: tl.constexpr,
                  CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        pid_n, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_n = pid_n * BN
        offs_n = start_n + tl.arange(0, BN)
        offs_d = tl.arange(0, BD)
        q_base, do_base = b.to(tl.int64) * sqb + h * sqh, b.to(tl.int64) * sdob + h * sdoh
        k_base, v_base = b.to(tl.int64) * skb + h * skh, b.to(tl.int64) * svb + h * svh
        r_base, cnt_base = bh.to(tl.int64) * T, b.to(tl.int64) * skmb
        beta = tl.load(GB + h)
        k = _rows(K, k_base, skt, offs_n, offs_d, T, D, True)
        v_full = _rows(V, v_base, svt, offs_n, offs_d, T, D, True)
        k = k.to(Q.dtype.element_ty)
        v = v_full.to(Q.dtype.element_ty)
        dk = tl.zeros([BN, BD], tl.float32)
        dv = tl.zeros([BN, BD], tl.float32)
        gcols = tl.zeros([BM, BD], tl.float32)
        full_end = (T // BM) * BM
        if CAUSAL:  # the key tile's own rows are the diagonal; later full query tiles see it whole
            mid = tl.minimum(start_n + BN, T)
            dk, dv, gcols = _dkdv_queries(dk, dv, gcols, k, v, Q, DO, LSE, DELTA, CNT, q_base, do_base, r_base,
                                          cnt_base, sqt, sdot, beta, offs_n, offs_d, start_n, mid, T, QK_SCALE, D,
                                          CAUSAL, HAS_MASK, HAS_GAMMA, True, True, BM)
            lo = mid
        else:
            lo = 0
        dk, dv, gcols = _dkdv_queries(dk, dv, gcols, k, v, Q, DO, LSE, DELTA, CNT, q_base, do_base, r_base,
                                      cnt_base, sqt, sdot, beta, offs_n, offs_d, lo, tl.maximum(lo, full_end), T,
                                      QK_SCALE, D, CAUSAL, HAS_MASK, HAS_GAMMA, False, False, BM)
        dk, dv, gcols = _dkdv_queries(dk, dv, gcols, k, v, Q, DO, LSE, DELTA, CNT, q_base, do_base, r_base,
                                      cnt_base, sqt, sdot, beta, offs_n, offs_d, tl.maximum(lo, full_end), T, T,
                                      QK_SCALE, D, CAUSAL, HAS_MASK, HAS_GAMMA, True, False, BM)
        keep = offs_n < T
        if HAS_MASK:  # a padded key is no key: its rows of P, and so of dK and dV, are zero
            keep = keep & (tl.load(KM + cnt_base + offs_n, mask=offs_n < T, other=0) != 0)
        dk = tl.where(keep[:, None], dk, 0.0)
        do_own = _rows(DO, do_base, sdot, offs_n, offs_d, T, D, True).to(tl.float32)
        v32 = v_full.to(tl.float32)
        dv = tl.load(GA + h) * do_own + beta * tl.where(keep[:, None], dv, 0.0)
        # Gain gradients per key row, not per tile: the autotuner runs every candidate tile size in
        # the first call, and per-tile slots of a smaller tile would outlive it in the buffer.
        tl.store(DALPHA + bh.to(tl.int64) * T + offs_n, tl.sum(do_own * v32, 1), mask=offs_n < T)
        if HAS_GAMMA:
            g = tl.sum(gcols, 0)[None, :]
            if CAUSAL:  # rows of this tile at or after key j: a reverse cumulative sum
                cnt = _count(CNT, cnt_base, offs_n, T, CAUSAL, HAS_MASK)
                g = g + tl.cumsum(do_own / tl.maximum(cnt, 1.0)[:, None], 0, reverse=True)
            g = tl.where(keep[:, None], g, 0.0)
            dv -= tl.load(GC + h) * g
            tl.store(DGAMMA + bh.to(tl.int64) * T + offs_n, -tl.sum(g * v32, 1), mask=offs_n < T)
        cols = (offs_n[:, None] < T) & (offs_d[None, :] < D)
        dk_ptrs = DK + b.to(tl.int64) * sdkb + h * sdkh + offs_n[:, None] * sdkt + offs_d[None, :]
        dv_ptrs = DV + b.to(tl.int64) * sdvb + h * sdvh + offs_n[:, None] * sdvt + offs_d[None, :]
        tl.store(dk_ptrs, (dk * SM_SCALE).to(DK.dtype.element_ty), mask=cols)
        tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=cols)

    # fmt: off
    @triton.jit
    def _dq_keys(dq, q, do, lse, delta, K, V, KM, k_base, v_base, km_base, skt, svt, beta, offs_m, offs_d,
                 lo, hi, T, QK_SCALE: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
                 HAS_MASK: tl.constexpr, MASKED: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        for start_n in range(lo, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k = _rows(K, k_base, skt, offs_n, offs_d, T, D, MASKED).to(q.dtype)
            v = _rows(V, v_base, svt, offs_n, offs_d, T, D, MASKED).to(q.dtype)
            p = tl.math.exp2(tl.dot(q, tl.trans(k)) * QK_SCALE - lse[:, None])
            if MASKED:
                ok = offs_n[None, :] < T
                if CAUSAL:
                    ok = ok & (offs_n[None, :] <= offs_m[:, None])
                p = tl.where(ok, p, 0.0)
            if HAS_MASK:
                km = tl.load(KM + km_base + offs_n, mask=offs_n < T, other=0) != 0
                p = tl.where(km[None, :], p, 0.0)
            ds = p * (beta * tl.dot(do, tl.trans(v)) - delta[:, None])
            dq += tl.dot(ds.to(q.dtype), k)
        return dq

    # fmt: off
    @triton.autotune(configs=_configs(DQ_TILES), key=TUNE_KEY)
    @triton.jit
    def bwd_dq(Q, K, V, KM, DO, LSE, DELTA, GB, DQ, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
                sdob, sdoh, sdot, skmb, sdqb, sdqh, sdqt, H, T, T_BUCKET,
                D: tl.constexpr, BD: tl.constexpr, SM_SCALE: tl.constexpr, QK_SCALE: tl.constexpr,
                CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_m = pid_m * BM
        offs_m = start_m + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        q = _rows(Q, b.to(tl.int64) * sqb + h * sqh, sqt, offs_m, offs_d, T, D, True)
        do = _rows(DO, b.to(tl.int64) * sdob + h * sdoh, sdot, offs_m, offs_d, T, D, True).to(q.dtype)
        lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=float("inf"))
        delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
        k_base, v_base = b.to(tl.int64) * skb + h * skh, b.to(tl.int64) * svb + h * svh
        km_base, beta = b.to(tl.int64) * skmb, tl.load(GB + h)
        dq = tl.zeros([BM, BD], tl.float32)
        if CAUSAL:
            lo, hi = start_m, tl.minimum(start_m + BM, T)
        else:
            lo, hi = (T // BN) * BN, T
        dq = _dq_keys(dq, q, do, lse, delta, K, V, KM, k_base, v_base, km_base, skt, svt, beta, offs_m, offs_d,
                      0, lo, T, QK_SCALE, D, CAUSAL, HAS_MASK, False, BN)
        dq = _dq_keys(dq, q, do, lse, delta, K, V, KM, k_base, v_base, km_base, skt, svt, beta, offs_m, offs_d,
                      lo, hi, T, QK_SCALE, D, CAUSAL, HAS_MASK, True, BN)
        ptrs = DQ + b.to(tl.int64) * sdqb + h * sdqh + offs_m[:, None] * sdqt + offs_d[None, :]
        tl.store(ptrs, (dq * SM_SCALE).to(DQ.dtype.element_ty), mask=(offs_m[:, None] < T) & (offs_d[None, :] < D))
