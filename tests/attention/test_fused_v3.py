"""Kernel v3: 16-bit dot operands with fp32 accumulation, and the O(T d) terms (alpha V, C V, their
gradients) outside the O(T^2) loops, built from the launcher's prefix and suffix sums. What
test_fused.py does not already pin; method, reference and tolerances as there (fused_cases.py).

On the CPU the kernels run in Triton's interpreter: fp16 natively, bf16 through the kernels' emulated
operand (`fused_kernels._op`: rounded to bf16 in fp32, see `interpreter_bf16_reason`)."""

import pytest
import torch

from blocklab.attention import fused
from blocklab.attention import fused_kernels as fk
from blocklab.attention.fused import fused_shaped_attention
from tests.attention.fused_cases import (
    CUDA,
    B,
    H,
    assert_matches_reference,
    kernel_args,
    lean_interpreter,
    make_inputs,
    make_mask,
    randn,
    rel_err,
    skip_unless_runs,
    slow_on_cpu,
    tolerance,
)


@pytest.fixture(autouse=True, scope="module")
def _fast_interpreter():
    with lean_interpreter():
        yield


F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16

# ---------------------------------------------------------------------------------------------------
# The launcher's O(T d) sums (torch only)


@pytest.mark.parametrize("T", [1, 15, 16, 17, 32, 40])
@pytest.mark.parametrize("mask_kind", ["none", "right", "broadcast"])
def test_chunk_sums_and_their_running_sums(T, mask_kind):
    """The forward's VSUM: row r is the sum of V's unmasked rows before row r * CHUNK (the last row all of
    them), for a split_heads view of V as the model passes it."""
    D = 8
    v = randn(B, T, H, D, seed=T, device="cpu").transpose(1, 2)
    mask = make_mask(mask_kind, T, "cpu")
    km = None if mask is None else mask.to(torch.int32)
    got = fused._running_sums(fused._chunk_sums(v, km))
    nc = -(-T // fk.CHUNK)
    w = v.double() * (km[:, None, :, None] if km is not None else 1)
    before = torch.cat([torch.zeros(B, H, 1, D, dtype=torch.float64), w.cumsum(2)], 2)  # row t: rows < t
    want = before[:, :, [min(r * fk.CHUNK, T) for r in range(nc + 1)]].reshape(B * H, nc + 1, D)
    assert got.dtype == torch.float32 and got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------------
# Forward and every gradient on irregular shapes, in every dtype the kernels take

# (T, D, causal, mask, gamma). T is no multiple of any tile or of CHUNK; D = 16 is a single 16-wide
# column block, D = 48 a column-masked one (BD = 64), which test_fused's powers of two never reach.
# Causal, T = 50: the dK/dV kernel's first 32-row key tile has a full 16-row query tile after its
# diagonal, so its unmasked loop runs too (from T = 48 on); bidirectional, every kernel's unmasked loop
# runs from T = 33 on, and T = 37 crosses each over two full tiles and then a partial one.
SHAPES = {
    "T37-D16-causal-left": (37, 16, True, "left", "random"),  # rows with no key, several chunks
    "T37-D16-bidir-right-nogamma": (37, 16, False, "right", None),  # v-skipinit: no centring
    "T50-D48-causal-none-gamma0": (50, 48, True, "none", "zero"),  # gamma = 0: d_gamma still nonzero
    "T37-D48-bidir-broadcast": (37, 48, False, "broadcast", "random"),  # holes in the keys
    "T33-D64-causal-right": (33, 64, True, "right", "random"),  # two chunks and a row
}
# (q and k, v): one dtype for all, or 16-bit q and k with an fp32 V (SAS under autocast: the fp32 output
# and its fp32 gradient, so both launcher casts to the dots' dtype run).
DTYPES = {
    "fp32": (F32, F32),
    "bf16": (BF16, BF16),
    "fp16": (F16, F16),
    "bf16-v-fp32": (BF16, F32),
    "fp16-v-fp32": (F16, F32),
}
# The interpreter's share: every shape in fp32 and bf16 (the emulated one, where the kernels' own
# rounding is); the other three dtype pairs on one causal and one bidirectional shape (D = 16 and 48,
# rows that see no key and a broadcast mask with holes, both centred). What the pairs add is dtype
# handling, the launcher's casts to the dots' dtype (VQ, DOQ) and fp16's native 16-bit tiles, which no
# shape changes: the shapes' paths are the same code in every dtype. CUDA runs the whole product.
CPU_PAIRS = {"fp32", "bf16"}
CPU_ALSO = {"T37-D16-causal-left", "T37-D48-bidir-broadcast"}


def _cases():
    for dt in DTYPES:
        for name in SHAPES:
            runs = CUDA or dt in CPU_PAIRS or name in CPU_ALSO
            marks = [] if runs else [pytest.mark.skip(reason="interpreter: covered on CUDA")]
            marks += [] if CUDA else [pytest.mark.slow]
            yield pytest.param(dt, name, marks=marks, id=f"{dt}-{name}")


@pytest.mark.parametrize("dt,shape", list(_cases()))
def test_irregular_shapes_match_float64_reference(device, dt, shape):
    T, D, causal, mask_kind, gamma = SHAPES[shape]
    qk, v = DTYPES[dt]
    skip_unless_runs({qk, v})
    (q, k, v), gains = make_inputs(T, D, device, (qk, qk, v), centred=gamma is not None, seed=T + D)
    if gamma == "zero":
        gains[2] = torch.zeros_like(gains[2]).requires_grad_()
    leaves = [q, k, v] + [x for x in gains if x is not None]
    names = "q k v alpha beta gamma".split()[: len(leaves)]
    mask = make_mask(mask_kind, T, device)
    _, grads = assert_matches_reference(kernel_args, leaves, names, causal, mask, tolerance({qk, v}, device))
    if gamma == "zero":
        assert grads[5].abs().max() > 0.1  # d_gamma = -sum <dO, C V>, whatever gamma is


# ---------------------------------------------------------------------------------------------------
# The dots take 16-bit operands and accumulate in fp32


def _just_below_half_ulp(shape, seed, device):
    """Values b + e in fp32: b in {1, 1 + 2^-7} (exact in bf16 and fp16), e in [0.5, 0.9] * 2^-12, below
    half an ulp of either at 1 (2^-8, 2^-11). Rounded to bf16 or fp16 they are exactly b."""
    g = torch.Generator().manual_seed(seed)
    b = 1 + 2.0**-7 * torch.randint(0, 2, shape, generator=g)
    e = (0.5 + 0.4 * torch.rand(shape, generator=g)) * 2.0**-12
    return (b + e).to(device), b.double().to(device)


@slow_on_cpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_attention_dots_round_v_and_do_to_16_bits_and_sum_in_fp32(device, dt, causal):
    """q = 0 makes every attention row uniform with exact probabilities (p = 1 before the normalisation,
    1/64 after it for the 64 keys of the bidirectional rows). With alpha = 0 and no centring, out_i is
    then the mean of the V_j with j <= i (causal) or of all V_j, and (bidirectional) dV_j the mean of the
    dO_i. V and dO are fp32 (autocast) with values that round to b exactly (`_just_below_half_ulp`): the
    16-bit dots with fp32 accumulators give the means of b to fp32 rounding, 0 for the backward's sums of
    64 multiples of 2^-13. Fed fp32 operands, the kernels would be off by the mean of e (>= 1.2e-4);
    summing in 16 bits, by the rounding of sums up to 65 (ulp 2^-4 in fp16, 2^-1 in bf16)."""
    dtype = {"bf16": BF16, "fp16": F16}[dt]
    skip_unless_runs({dtype})
    T, D = 64, 32
    q = torch.zeros(B, H, T, D, device=device, dtype=dtype, requires_grad=True)
    k = randn(B, H, T, D, seed=1, device=device, dtype=dtype).requires_grad_()
    v, v_b = _just_below_half_ulp((B, H, T, D), seed=2, device=device)
    v.requires_grad_()
    alpha = torch.zeros(H, device=device, requires_grad=True)
    beta = torch.ones(H, device=device, requires_grad=True)
    out = fused_shaped_attention(q, k, v, alpha, beta, None, causal)
    assert out.dtype == F32
    n = torch.arange(1, T + 1, device=device, dtype=torch.float64)[:, None]
    mean = (lambda x: x.cumsum(2) / n) if causal else (lambda x: x.mean(2, keepdim=True).expand_as(x))
    assert rel_err(out, mean(v_b)) <= 1e-6
    assert rel_err(out, mean(v.detach().double())) >= 1e-4
    if not causal:
        do, do_b = _just_below_half_ulp(tuple(out.shape), seed=3, device=device)
        (dv,) = torch.autograd.grad(out, [v], do)
        assert rel_err(dv, mean(do_b)) <= 1e-6  # 0 in the interpreter: every sum is exact
        assert rel_err(dv, mean(do.double())) >= 1e-4


@pytest.mark.skipif(CUDA, reason="records the dots of Triton's interpreter")
@slow_on_cpu
@pytest.mark.parametrize("dt", ["fp16-v-fp32", "fp16", "fp32"])
def test_every_interpreted_dot_takes_operands_of_the_inputs_dtype(device, dt, monkeypatch):
    """Every tl.dot of the forward and backward, as the interpreter executes it: operands in q's dtype,
    the accumulator fp32, also where V and dO are fp32 (autocast). fp16 is the 16-bit dtype the
    interpreter runs without emulation; bf16 takes the same `_op` casts, emulated in fp32 here (its
    values are checked above)."""
    from triton.runtime import interpreter

    seen = []
    create_dot = interpreter.InterpreterBuilder.create_dot

    def record(self, a, b, d, *args, **kwargs):
        seen.append((str(a.dtype), str(b.dtype), str(d.dtype)))
        return create_dot(self, a, b, d, *args, **kwargs)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", record)
    qk, v = DTYPES[dt]
    (q, k, v), gains = make_inputs(40, 32, device, (qk, qk, v))
    out = fused_shaped_attention(q, k, v, *gains, True, make_mask("right", 40, device))
    out.backward(torch.ones_like(out))
    operand = {F16: "fp16", F32: "fp32"}[qk]
    # forward: 2 dots per key tile; dK/dV: 3 per query tile; dQ: 2 per key tile
    assert len(seen) > 3 * 7 and set(seen) == {(operand, operand, "fp32")}, sorted(set(seen))


@pytest.mark.parametrize("combo", ["bf16-v-fp32", "fp32"])
def test_the_loops_get_their_operands_in_the_dots_dtype(device, combo, monkeypatch):
    """The launches (recorded, not run): the buffers the O(T^2) loops read (VQ, DOQ) are in q's dtype,
    cast once by the launcher or the row pass, while the epilogues read V and dO as given; with fp32
    inputs nothing is cast and VQ is V itself."""
    launches = {}

    class Record:
        def __init__(self, kernel):
            self.fn = kernel.fn if hasattr(kernel, "configs") else kernel  # the kernel under an autotuner

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches[self.fn.__name__] = dict(zip(self.fn.arg_names, args))

            return launch

    monkeypatch.setattr(fused, "wrap_triton", Record)
    qk, vt = DTYPES[combo]
    (q, k, v), gains = make_inputs(40, 32, device, (qk, qk, vt))
    out = fused_shaped_attention(q, k, v, *gains, True, None)
    out.backward(torch.ones_like(out))
    assert out.dtype == vt
    for kernel, names in {
        "fwd": ["VQ"],
        "bwd_rows": ["DOQ"],
        "bwd_dkdv": ["VQ", "DOQ"],
        "bwd_dq": ["VQ", "DOQ"],
    }.items():
        assert all(launches[kernel][n].dtype == qk for n in names), kernel
    assert launches["fwd"]["V"].dtype == vt and launches["bwd_dkdv"]["DO"].dtype == vt
    assert (launches["fwd"]["VQ"] is launches["fwd"]["V"]) == (qk == vt)
    assert (launches["bwd_rows"]["DOQ"] is launches["bwd_rows"]["DO"]) == (qk == vt)
