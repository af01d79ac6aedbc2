"""Shaped attention as Triton kernels in the manner of FlashAttention-2 (`attn_impl="fused"`), v3.

Per head: out_h = alpha_h V_h + beta_h softmax(mask(Q_h K_h^T / sqrt(d_h))) V_h - gamma_h C V_h.

The reference it must equal is the materialised formula in `modules.ShapedAttention`
(`attn_impl="materialized"`); the launcher, its `torch.library` op and autograd are in
`fused.py`. The T x T matrix never exists.

What runs where (v3). The O(T^2) loops hold nothing but FlashAttention-2's work: tiles loaded in
the dots' dtype DT (q's: bf16 or fp16 under autocast, and then every tl.dot takes 16-bit Q, K, V,
dO, P and dS tiles into an fp32 accumulator; fp32 inputs keep fp32 operands, TF32 on a GPU), the
online softmax in base 2 with fp32 statistics, and masks built only on diagonal and boundary
tiles. Every O(T d) term touches each row once, outside those loops:
- forward: the launcher (`fused.py`) casts V to DT once (VQ, what the key loop reads: under
  autocast V = Norm(x) is fp32, and v2 loaded and converted it in every query tile's loop) and sums
  V's unmasked rows in fp32 over chunks of CHUNK rows, then a running sum over the chunks (VSUM:
  torch ops reading V once and writing T / CHUNK rows, fused by inductor under torch.compile).
  `fwd`'s epilogue, after the key loop, adds alpha V and subtracts gamma C V, C V = (VSUM's row at
  the tile's first query + a running sum of the tile's own V rows) / count: a cumulative mean
  (bidirectional: VSUM's last row, the sum of all rows), no matmul, from the full-precision V.
- backward: `bwd_rows`, the row pass, reads dO once and writes what the loops and epilogues need
  from it: delta = beta <dO, A V> and d_beta's partial sums (as FlashAttention's row pass), dO in DT
  (DOQ) and the sums of dO_i / count_i over each chunk (GPART, last chunk first), whose running sum
  the launcher takes (GSUF: row r sums the last r chunks). `bwd_dkdv` loops over query tiles for
  P^T dO and dS^T Q only; its epilogue forms dV = alpha dO + beta P^T dO - gamma C^T dO, C^T dO =
  GSUF's sum of the rows after the key tile + a reverse running sum of the tile's own dO / count
  (bidirectional: all rows), and per key row the terms of d_alpha = sum <dO, V> and d_gamma =
  -sum <C^T dO, V>. `bwd_dq` loops over key tiles for dQ only.
Why: the loops are where the time goes; 16-bit tiles halve the bytes each one loads and keep the
tensor cores fed, and the O(T d) terms cost a few passes over T x d instead of work per tile
pair. The gain terms stay in fp32 from the full-precision V and dO, as the sdpa path computes them.

A query row that sees no key (all its keys padded) gets a zero attention row and a zero centring
row, never NaN: its log-sum-exp is stored as +inf so the backward's p is 0, and its count is 0
with every key before it masked, so its chunk sums hold zeros.

Triton's interpreter (the CPU tests) gets one small tile pair per kernel and, since it keeps bf16
as raw 16-bit integers and its bf16 arithmetic and tl.dot are wrong, an emulated bf16 operand:
`_op` rounds to bf16 (to nearest, ties to even) and keeps the value in fp32, whose products are
exact, so an interpreted dot is the tensor core's bf16 x bf16 -> fp32 dot. Compiled kernels never
see that branch (`_EMULATE_BF16` is a compile-time False); fp16 runs unemulated in the interpreter.

Hopper features are not used. Warp specialisation (`tl.range(..., warp_specialize=True)`) runs in
the interpreter, but Triton 3.9's sm_90 lowering rejects it (its NVGPUWarpSpecialization pass
fails even on a one-dot loop). TMA tensor descriptors would need a process-wide
`triton.set_allocator` (device-side descriptors) or descriptors built per call on the host, and a
fallback for views whose base or row stride is not 16-byte aligned. Neither could be timed without
a GPU, and a feature that has not been measured faster on the device does not go in.
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
# Rows per prefix/suffix sum of the centring term. The forward's query tiles start and the dK/dV
# kernel's key tiles end on a multiple of it, whichever tile the autotuner picks.
CHUNK = 16
assert all(bm % CHUNK == 0 for bm, *_ in FWD_TILES) and ROW_TILE % CHUNK == 0
assert all(bn % CHUNK == 0 for _, bn, *_ in DKDV_TILES)

if triton is not None:
    _CHUNK = tl.constexpr(CHUNK)
    _EMULATE_BF16 = tl.constexpr(INTERPRET)

    @triton.jit
    def _bf16_round(x):
        """fp32 x rounded to the nearest bf16 value (ties to even), kept in fp32 (interpreter only)."""
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)

    @triton.jit
    def _op(x, DT: tl.constexpr):
        """x as a tl.dot operand of the dots' dtype DT: a 16-bit tensor-core operand, or fp32."""
        if _EMULATE_BF16 and DT == tl.bfloat16:
            return _bf16_round(x.to(tl.float32))
        return x.to(DT)

    @triton.jit
    def _st(x, DT: tl.constexpr):
        """fp32 x as stored in a DT buffer, rounded to nearest (the interpreter's own cast truncates)."""
        if _EMULATE_BF16 and DT == tl.bfloat16:
            return _bf16_round(x).to(DT)
        return x.to(DT)

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

    @triton.jit
    def _chunk_row(SUMS, bh, row, offs_d, T, D: tl.constexpr):
        """Row `row` of one head's (ceil(T / CHUNK) + 1, D) fp32 running sums over chunks (`fused._running_sums`:
        row r sums r chunks, the first r of V or the last r of dO / count), as a (1, BD) block."""
        nc = tl.cdiv(T, _CHUNK)
        return tl.load(SUMS + (bh.to(tl.int64) * (nc + 1) + row) * D + offs_d, mask=offs_d < D, other=0.0)[None, :]

    # fmt: off
    @triton.jit
    def _fwd_keys(acc, l_i, m_i, q, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, offs_m, offs_d, lo, hi, T,
                  QK_SCALE: tl.constexpr, D: tl.constexpr, DT: tl.constexpr, CAUSAL: tl.constexpr,
                  HAS_MASK: tl.constexpr, MASKED: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        """Key tiles [lo, hi): the online softmax into (acc, l_i, m_i), every dot on DT operands."""
        for start_n in range(lo, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k = _op(_rows(K, k_base, skt, offs_n, offs_d, T, D, MASKED), DT)
            s = tl.dot(q, tl.trans(k)) * QK_SCALE
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
            v = _op(_rows(VQ, vq_base, svqt, offs_n, offs_d, T, D, MASKED), DT)
            acc = tl.dot(_op(p, DT), v, acc * corr[:, None])
            m_i = m_new
        return acc, l_i, m_i

    # fmt: off
    @triton.autotune(configs=_configs(FWD_TILES), key=TUNE_KEY)
    @triton.jit
    def fwd(Q, K, V, VQ, VSUM, KM, CNT, GA, GB, GC, OUT, ATT, LSE,
            sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, svqb, svqh, svqt, skmb, H, T, T_BUCKET,
            D: tl.constexpr, BD: tl.constexpr, QK_SCALE: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        DT: tl.constexpr = Q.dtype.element_ty
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_m = pid_m * BM
        offs_m = start_m + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        k_base, km_base = b.to(tl.int64) * skb + h * skh, b.to(tl.int64) * skmb
        v_base, vq_base = b.to(tl.int64) * svb + h * svh, b.to(tl.int64) * svqb + h * svqh
        q = _op(_rows(Q, b.to(tl.int64) * sqb + h * sqh, sqt, offs_m, offs_d, T, D, True), DT)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, BD], tl.float32)
        if CAUSAL:  # keys before the query tile are all visible; the tile's own keys are the diagonal
            lo, hi = start_m, tl.minimum(start_m + BM, T)
        else:  # every full key tile is visible; only the last partial one needs a bound
            lo, hi = (T // BN) * BN, T
        acc, l_i, m_i = _fwd_keys(acc, l_i, m_i, q, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, offs_m, offs_d,
                                  0, lo, T, QK_SCALE, D, DT, CAUSAL, HAS_MASK, False, BN)
        acc, l_i, m_i = _fwd_keys(acc, l_i, m_i, q, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, offs_m, offs_d,
                                  lo, hi, T, QK_SCALE, D, DT, CAUSAL, HAS_MASK, True, BN)
        # Epilogue: the O(T d) terms, from the full-precision V rows of this tile.
        att = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        v_own = _rows(V, v_base, svt, offs_m, offs_d, T, D, True).to(tl.float32)
        out = tl.load(GA + h) * v_own + tl.load(GB + h) * att
        if HAS_GAMMA:  # C V: a cumulative (causal) or plain mean of the unmasked rows, from VSUM
            if CAUSAL:
                w = v_own
                if HAS_MASK:
                    km = tl.load(KM + km_base + offs_m, mask=offs_m < T, other=0) != 0
                    w = tl.where(km[:, None], w, 0.0)
                num = _chunk_row(VSUM, bh, start_m // _CHUNK, offs_d, T, D) + tl.cumsum(w, 0)
            else:
                num = _chunk_row(VSUM, bh, tl.cdiv(T, _CHUNK), offs_d, T, D)  # the last row: every row
            cnt = _count(CNT, km_base, offs_m, T, CAUSAL, HAS_MASK)
            out -= tl.load(GC + h) * (num / tl.maximum(cnt, 1.0)[:, None])
        # OUT and ATT are (B, T, H, D) contiguous: the merged-heads layout, written in place.
        o_ptrs = (b.to(tl.int64) * T * H + h) * D + offs_m[:, None] * (H * D) + offs_d[None, :]
        rows = (offs_m[:, None] < T) & (offs_d[None, :] < D)
        tl.store(OUT + o_ptrs, _st(out, OUT.dtype.element_ty), mask=rows)
        tl.store(ATT + o_ptrs, _st(att, ATT.dtype.element_ty), mask=rows)
        lse = tl.where(l_i > 0, m_i + tl.math.log2(tl.where(l_i > 0, l_i, 1.0)), float("inf"))
        tl.store(LSE + bh.to(tl.int64) * T + offs_m, lse, mask=offs_m < T)

    # fmt: off
    @triton.jit
    def bwd_rows(DO, DOQ, ATT, KM, CNT, GB, DELTA, DBETA, GPART, sdob, sdoh, sdot, skmb, H, T, NT,
                 D: tl.constexpr, BD: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
                 HAS_GAMMA: tl.constexpr, BM: tl.constexpr):
        # fmt: on
        """The row pass: what the backward's loops and epilogues need from dO, read once.
        delta_i = beta <dO_i, (A V)_i> (flash attention's row term), this tile's part of d_beta,
        dO in the dots' dtype (DOQ, same strides; skipped where it is dO itself) and the sums of
        dO_i / count_i over each CHUNK of rows (GPART, for C^T dO)."""
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        do_base = b.to(tl.int64) * sdob + h * sdoh
        do = _rows(DO, do_base, sdot, offs_m, offs_d, T, D, True).to(tl.float32)
        if DOQ.dtype.element_ty != DO.dtype.element_ty:
            ptrs = DOQ + do_base + offs_m[:, None] * sdot + offs_d[None, :]
            tl.store(ptrs, _st(do, DOQ.dtype.element_ty), mask=(offs_m[:, None] < T) & (offs_d[None, :] < D))
        att = _rows(ATT, (b.to(tl.int64) * T * H + h) * D, H * D, offs_m, offs_d, T, D, True).to(tl.float32)
        r = tl.sum(do * att, 1)
        tl.store(DELTA + bh.to(tl.int64) * T + offs_m, tl.load(GB + h) * r, mask=offs_m < T)
        tl.store(DBETA + bh.to(tl.int64) * NT + pid_m, tl.sum(r, 0))
        if HAS_GAMMA:
            cnt = _count(CNT, b.to(tl.int64) * skmb, offs_m, T, CAUSAL, HAS_MASK)
            g = tl.sum(tl.reshape(do / tl.maximum(cnt, 1.0)[:, None], [BM // _CHUNK, _CHUNK, BD]), 1)
            nc = tl.cdiv(T, _CHUNK)
            offs_c = pid_m * (BM // _CHUNK) + tl.arange(0, BM // _CHUNK)  # stored last chunk first
            ptrs = GPART + (bh.to(tl.int64) * nc + (nc - 1 - offs_c)[:, None]) * D + offs_d[None, :]
            tl.store(ptrs, g, mask=(offs_c[:, None] < nc) & (offs_d[None, :] < D))

    # fmt: off
    @triton.jit
    def _dkdv_queries(dk, dv, k, v, Q, DOQ, LSE, DELTA, q_base, do_base, r_base, sqt, sdot, beta, offs_n, offs_d,
                      lo, hi, T, QK_SCALE: tl.constexpr, D: tl.constexpr, DT: tl.constexpr,
                      MASKED: tl.constexpr, DIAG: tl.constexpr, BM: tl.constexpr):
        # fmt: on
        """Query tiles [lo, hi) against one key tile, transposed (keys are rows): P^T dO and dS^T Q."""
        for start_m in range(lo, hi, BM):
            offs_m = start_m + tl.arange(0, BM)
            q = _op(_rows(Q, q_base, sqt, offs_m, offs_d, T, D, MASKED), DT)
            do = _op(_rows(DOQ, do_base, sdot, offs_m, offs_d, T, D, MASKED), DT)
            lse = tl.load(LSE + r_base + offs_m, mask=offs_m < T, other=float("inf"))
            delta = tl.load(DELTA + r_base + offs_m, mask=offs_m < T, other=0.0)
            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * QK_SCALE - lse[None, :])
            if DIAG:
                p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
            dv = tl.dot(_op(p_t, DT), do, dv)
            ds_t = p_t * (beta * tl.dot(v, tl.trans(do)) - delta[None, :])
            dk = tl.dot(_op(ds_t, DT), q, dk)
        return dk, dv

    # fmt: off
    @triton.autotune(configs=_configs(DKDV_TILES), key=TUNE_KEY)
    @triton.jit
    def bwd_dkdv(Q, K, V, VQ, KM, CNT, DO, DOQ, LSE, DELTA, GSUF, GA, GB, GC, DK, DV, DALPHA, DGAMMA,
                 sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, svqb, svqh, svqt, sdob, sdoh, sdot, skmb,
                 sdkb, sdkh, sdkt, sdvb, sdvh, sdvt, H, T, T_BUCKET,
                 D: tl.constexpr, BD: tl.constexpr, SM_SCALE: tl.constexpr, QK_SCALE: tl.constexpr,
                 CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        DT: tl.constexpr = Q.dtype.element_ty
        pid_n, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_n = pid_n * BN
        offs_n = start_n + tl.arange(0, BN)
        offs_d = tl.arange(0, BD)
        q_base, do_base = b.to(tl.int64) * sqb + h * sqh, b.to(tl.int64) * sdob + h * sdoh
        v_base, vq_base = b.to(tl.int64) * svb + h * svh, b.to(tl.int64) * svqb + h * svqh
        r_base, cnt_base = bh.to(tl.int64) * T, b.to(tl.int64) * skmb
        beta = tl.load(GB + h)
        k = _op(_rows(K, b.to(tl.int64) * skb + h * skh, skt, offs_n, offs_d, T, D, True), DT)
        v = _op(_rows(VQ, vq_base, svqt, offs_n, offs_d, T, D, True), DT)
        dk = tl.zeros([BN, BD], tl.float32)
        dv = tl.zeros([BN, BD], tl.float32)
        full_end = (T // BM) * BM
        if CAUSAL:  # the key tile's own rows are the diagonal; later full query tiles see it whole
            mid = tl.minimum(start_n + BN, T)
            dk, dv = _dkdv_queries(dk, dv, k, v, Q, DOQ, LSE, DELTA, q_base, do_base, r_base, sqt, sdot, beta,
                                   offs_n, offs_d, start_n, mid, T, QK_SCALE, D, DT, True, True, BM)
            lo = mid
        else:
            lo = 0
        dk, dv = _dkdv_queries(dk, dv, k, v, Q, DOQ, LSE, DELTA, q_base, do_base, r_base, sqt, sdot, beta,
                               offs_n, offs_d, lo, tl.maximum(lo, full_end), T, QK_SCALE, D, DT, False, False, BM)
        dk, dv = _dkdv_queries(dk, dv, k, v, Q, DOQ, LSE, DELTA, q_base, do_base, r_base, sqt, sdot, beta,
                               offs_n, offs_d, tl.maximum(lo, full_end), T, T, QK_SCALE, D, DT, True, False, BM)
        # Epilogue: the O(T d) terms, from the full-precision dO and V rows of this key tile.
        keep = offs_n < T
        if HAS_MASK:  # a padded key is no key: its rows of P, and so of dK and dV, are zero
            keep = keep & (tl.load(KM + cnt_base + offs_n, mask=offs_n < T, other=0) != 0)
        dk = tl.where(keep[:, None], dk, 0.0)
        do_own = _rows(DO, do_base, sdot, offs_n, offs_d, T, D, True).to(tl.float32)
        v32 = _rows(V, v_base, svt, offs_n, offs_d, T, D, True).to(tl.float32)
        dv = tl.load(GA + h) * do_own + beta * tl.where(keep[:, None], dv, 0.0)
        # Gain gradients per key row, not per tile: the autotuner runs every candidate tile size in
        # the first call, and per-tile slots of a smaller tile would outlive it in the buffer.
        tl.store(DALPHA + bh.to(tl.int64) * T + offs_n, tl.sum(do_own * v32, 1), mask=offs_n < T)
        if HAS_GAMMA:  # C^T dO: the rows after the tile (GSUF) and, causal, those of the tile at or after j
            nc = tl.cdiv(T, _CHUNK)
            if CAUSAL:
                g = _chunk_row(GSUF, bh, nc - tl.minimum((start_n + BN) // _CHUNK, nc), offs_d, T, D)
                cnt = _count(CNT, cnt_base, offs_n, T, CAUSAL, HAS_MASK)
                g = g + tl.cumsum(do_own / tl.maximum(cnt, 1.0)[:, None], 0, reverse=True)
            else:
                g = _chunk_row(GSUF, bh, nc, offs_d, T, D)  # the last row: every row
            g = tl.where(keep[:, None], g, 0.0)
            dv -= tl.load(GC + h) * g
            tl.store(DGAMMA + bh.to(tl.int64) * T + offs_n, -tl.sum(g * v32, 1), mask=offs_n < T)
        cols = (offs_n[:, None] < T) & (offs_d[None, :] < D)
        dk_ptrs = DK + b.to(tl.int64) * sdkb + h * sdkh + offs_n[:, None] * sdkt + offs_d[None, :]
        dv_ptrs = DV + b.to(tl.int64) * sdvb + h * sdvh + offs_n[:, None] * sdvt + offs_d[None, :]
        tl.store(dk_ptrs, _st(dk * SM_SCALE, DK.dtype.element_ty), mask=cols)
        tl.store(dv_ptrs, _st(dv, DV.dtype.element_ty), mask=cols)

    # fmt: off
    @triton.jit
    def _dq_keys(dq, q, do, lse, delta, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, beta, offs_m, offs_d,
                 lo, hi, T, QK_SCALE: tl.constexpr, D: tl.constexpr, DT: tl.constexpr, CAUSAL: tl.constexpr,
                 HAS_MASK: tl.constexpr, MASKED: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        for start_n in range(lo, hi, BN):
            offs_n = start_n + tl.arange(0, BN)
            k = _op(_rows(K, k_base, skt, offs_n, offs_d, T, D, MASKED), DT)
            v = _op(_rows(VQ, vq_base, svqt, offs_n, offs_d, T, D, MASKED), DT)
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
            dq = tl.dot(_op(ds, DT), k, dq)
        return dq

    # fmt: off
    @triton.autotune(configs=_configs(DQ_TILES), key=TUNE_KEY)
    @triton.jit
    def bwd_dq(Q, K, VQ, KM, DOQ, LSE, DELTA, GB, DQ, sqb, sqh, sqt, skb, skh, skt, svqb, svqh, svqt,
               sdob, sdoh, sdot, skmb, sdqb, sdqh, sdqt, H, T, T_BUCKET,
               D: tl.constexpr, BD: tl.constexpr, SM_SCALE: tl.constexpr, QK_SCALE: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, HAS_GAMMA: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr):
        # fmt: on
        DT: tl.constexpr = Q.dtype.element_ty
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        start_m = pid_m * BM
        offs_m = start_m + tl.arange(0, BM)
        offs_d = tl.arange(0, BD)
        q = _op(_rows(Q, b.to(tl.int64) * sqb + h * sqh, sqt, offs_m, offs_d, T, D, True), DT)
        do = _op(_rows(DOQ, b.to(tl.int64) * sdob + h * sdoh, sdot, offs_m, offs_d, T, D, True), DT)
        lse = tl.load(LSE + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=float("inf"))
        delta = tl.load(DELTA + bh.to(tl.int64) * T + offs_m, mask=offs_m < T, other=0.0)
        k_base, vq_base = b.to(tl.int64) * skb + h * skh, b.to(tl.int64) * svqb + h * svqh
        km_base, beta = b.to(tl.int64) * skmb, tl.load(GB + h)
        dq = tl.zeros([BM, BD], tl.float32)
        if CAUSAL:
            lo, hi = start_m, tl.minimum(start_m + BM, T)
        else:
            lo, hi = (T // BN) * BN, T
        dq = _dq_keys(dq, q, do, lse, delta, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, beta, offs_m, offs_d,
                      0, lo, T, QK_SCALE, D, DT, CAUSAL, HAS_MASK, False, BN)
        dq = _dq_keys(dq, q, do, lse, delta, K, VQ, KM, k_base, vq_base, km_base, skt, svqt, beta, offs_m, offs_d,
                      lo, hi, T, QK_SCALE, D, DT, CAUSAL, HAS_MASK, True, BN)
        ptrs = DQ + b.to(tl.int64) * sdqb + h * sdqh + offs_m[:, None] * sdqt + offs_d[None, :]
        tl.store(ptrs, _st(dq * SM_SCALE, DQ.dtype.element_ty), mask=(offs_m[:, None] < T) & (offs_d[None, :] < D))
