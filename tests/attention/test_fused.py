"""The fused shaped-attention kernel (`attn_impl="fused"`) against a float64 reference, where it runs.

Every kernel test runs on the one device where the kernel runs in this process, and builds its
tensors there: CUDA when a GPU is present (the compiled kernels), else the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before blocklab is imported; the variable is
read when a kernel is defined, so one process cannot hold both). A GPU machine never checks CPU
tensors, and a CPU machine checks the same kernel source at the shapes the interpreter can afford
(the rest are skipped there with the reason "interpreter: covered on CUDA").

The reference is the materialised formula (alpha I + beta A - gamma C) V in float64 on the same
device, from float64 copies of the very values the kernel gets. A row that may see no key (causal
with left padding, an all-padding sequence) has a zero row in C (`centring_matrix` clamps the count
to 1) and, by the kernel's contract, a zero row in A: its output is alpha V, with no NaN anywhere.

Errors are measured per tensor (the output and the gradient of every input) as
max|got - ref| / max(1, max|ref|); the tolerances are in `tolerance` with their reasons.

bf16 kernel inputs: Triton 3.9.0's interpreter raises no error on bf16 but computes on the raw 16-bit
patterns (a 16 x 16 bf16 tl.dot plus 2x gave 1.8e10 where the product is -1.3). The kernels (v3) take
every dot operand through `fused_kernels._op`, which under the interpreter rounds a bf16 operand to
nearest in fp32 (exactly the tensor core's operand), so the bf16 cases run on the CPU too, checking
where the kernels round; `interpreter_bf16_reason` probes that emulation at run time and skips them
if it breaks. What the interpreter cannot check is the compiled bf16 MMA itself: CUDA runs every case.
The CPU runs a share of the bf16 product (BF16_CPU): the mask and tile paths are the fp32 cases'.
"""

import itertools

import pytest
import torch

from blocklab.attention.centring import allowed, centred_mean, centring_matrix
from blocklab.attention.functional import attention_matrix, softmax_attention
from blocklab.attention.fused import fused_shaped_attention
from tests.attention.fused_cases import (
    CUDA,
    MASKS,
    ON_CPU,
    B,
    H,
    assert_matches_reference,
    kernel_args,
    lean_interpreter,
    make_inputs,
    make_mask,
    needs_cuda,
    randn,
    reference,
    rel_err,
    skip_unless_runs,
    slow_on_cpu,
    tolerance,
)


@pytest.fixture(autouse=True, scope="module")
def _fast_interpreter():
    with lean_interpreter():
        yield


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_reference_is_the_materialised_and_the_sdpa_formula(device, causal, mask_kind):
    """Guard on the reference: on rows that see a key it equals the model's materialised path
    (attention_matrix, centring_matrix) and the sdpa path's composition (softmax_attention,
    centred_mean); on rows that see none it is alpha V, finite, with finite gradients."""
    T = 17
    (q, k, v), (a, b, g) = make_inputs(T, 32, device)
    q, k, v, a, b, g = (x.detach().double() for x in (q, k, v, a, b, g))
    mask = make_mask(mask_kind, T, device)
    ref = reference(q, k, v, a, b, g, causal, mask)
    gv = lambda x: x.view(1, -1, 1, 1)  # noqa: E731
    mat = (
        gv(a) * torch.eye(T, dtype=torch.float64, device=device)
        + gv(b) * attention_matrix(q, k, causal, mask)
        - gv(g) * centring_matrix(T, causal, mask, device, torch.float64)
    ) @ v
    sdpa = gv(a) * v + gv(b) * softmax_attention(q, k, v, causal, mask, "sdpa") - gv(g) * centred_mean(v, causal, mask)
    seen = allowed(T, causal, mask, device).any(-1).expand(B, H, T)
    assert (~seen).any() == (causal and mask_kind == "left")  # the no-key rows are where they should be
    torch.testing.assert_close(ref[seen], mat[seen], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ref[seen], sdpa[seen], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ref[~seen], (gv(a) * v)[~seen], rtol=0, atol=0)
    leaves = [x.requires_grad_() for x in (q, k, v, a, b, g)]
    grads = torch.autograd.grad(reference(*leaves, causal, mask).sum(), leaves)
    assert all(x.isfinite().all() for x in grads)


# ---------------------------------------------------------------------------------------------------
# The kernel: forward and every gradient, fp32 and bf16, every mask, irregular shapes

TS = (1, 17, 128, 300, 1000)
DS = (32, 64, 128)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# The interpreter's share (under 1 s per fwd+bwd at T=17): every mask/causal/centring case at T <= 17,
# D=32; two hard cases (rows with no key; a broadcast mask with holes) at D=64 too; those two hard cases
# again where T is a multiple of every tile (fp32, D=32); and one long case. CUDA runs the whole product.
HARD = {(True, "left", True), (False, "broadcast", False)}
# The interpreter's tiles are 16 (forward), 16 x 32 (dK/dV) and 32 x 16 (dQ) rows: T=64 is a whole
# number of tiles in each kernel and more than one in each grid, so every unmasked tile loop runs and
# every masked boundary loop is empty, the paths T=128 took, at a quarter of its interpreted tiles
# (T=128 differs only in running two 64-row tiles in the row pass, which has no masked/unmasked split
# and whose several row tiles CPU_LONG covers). CUDA runs T=128. Not at D=64 on the CPU: like D=32, one
# unmasked power-of-two column block, the same statements (D=64 runs at T <= 17 and in CPU_LONG). Not in
# bf16: its rounding is in the same statements of every loop, and test_fused_v3's bf16 cases (T = 50
# causal, T = 37 bidirectional) take it through each kernel's unmasked, diagonal and boundary tiles.
CPU_TILED = [("fp32", 64, 32, *hard) for hard in sorted(HARD)]
# The long case on the CPU: T=70 takes the interpreter through the paths T=300 did (two row tiles of 64
# with a partial last one, partial 16- and 32-row tiles, several key tiles before the diagonal, left
# padding that ends inside a tile) in about half the time of T=100, which took the same paths (and T=300
# 27 s of CPU); CUDA runs T=300 and T=1000.
CPU_LONG = ("fp32", 70, 64, True, "left", True)
# At T=1 a left and a right mask are the same mask (the second sequence all padding), and the launcher
# hands the kernel either as int32: the left cases would repeat the right ones bit for bit. The mask
# dtypes (right: int, left: bool) stay covered at T=17; D=64 keeps its hard left case.
T1_LEFT = "interpreter: at T=1 the same kernel inputs as the right-padded case"
# At T=1 the broadcast mask is one real key, no hole: the unmasked case's values through the masked code,
# which the right-padded T=1 cases (a per-sequence mask) and the broadcast T=17 cases (the same launch
# with holes, several tiles) run on the CPU.
# The cases make test-fast interprets: rows with no key, a broadcast mask with holes and no centring,
# a single token; the rest of the CPU's share is `slow` there.
CPU_FAST = {
    ("fp32", 17, 32, True, "left", True),
    ("fp32", 17, 32, False, "broadcast", False),
    ("fp32", 1, 32, True, "right", True),
}


# bf16 on the CPU (T <= 17, D=32): the hard cases, a right-padded causal and an unmasked bidirectional
# centred case (both centring paths), besides the longer shapes of test_fused_v3.py (D = 16, 48, 64). The
# other mask and tile paths are the fp32 cases', and where bf16 rounds (dot operands, stores) is the same
# in each.
BF16_CPU = HARD | {(True, "right", True), (False, "none", True)}
BF16_REPEATS = "interpreter: the fp32 case's paths; bf16 rounding checked on BF16_CPU's cases"


def _cpu_skip(dt, T, D, causal, mask, centred) -> str | None:
    """Why the interpreter skips this case of the CUDA product (None: it runs it)."""
    if T == 1 and D == 32 and mask == "left":
        return T1_LEFT
    if T == 1 and mask == "broadcast":
        return ON_CPU
    if T <= 17 and (D == 32 or (D == 64 and (causal, mask, centred) in HARD)):
        bf16_repeat = D != 32 or (causal, mask, centred) not in BF16_CPU
        return BF16_REPEATS if dt == "bf16" and bf16_repeat else None
    if T == 128 and (dt, 64, D, causal, mask, centred) in CPU_TILED:
        return "interpreter: T=64 here (a whole number of tiles, as T=128); T=128 on CUDA"
    return ON_CPU


def _case_id(dt, T, D, causal, mask, centred) -> str:
    return f"{dt}-T{T}-D{D}-{'causal' if causal else 'bidir'}-{mask}-{'sas' if centred else 'nogamma'}"


def _cases():
    for case in itertools.product(DTYPES, TS, DS, (True, False), MASKS, (True, False)):
        skip = None if CUDA else _cpu_skip(*case)
        marks = [] if skip is None else [pytest.mark.skip(reason=skip)]
        if not CUDA and case not in CPU_FAST:
            marks.append(pytest.mark.slow)
        yield pytest.param(*case, marks=marks, id=_case_id(*case))
    if not CUDA:
        for case in (*CPU_TILED, CPU_LONG):
            yield pytest.param(*case, marks=[pytest.mark.slow], id=_case_id(*case))


@pytest.mark.parametrize("dt,T,D,causal,mask_kind,centred", list(_cases()))
def test_kernel_matches_float64_reference(device, dt, T, D, causal, mask_kind, centred):
    dtype = DTYPES[dt]
    skip_unless_runs({dtype})
    (q, k, v), gains = make_inputs(T, D, device, (dtype,) * 3, centred, seed=T + D)
    mask = make_mask(mask_kind, T, device)
    leaves = [q, k, v] + [x for x in gains if x is not None]
    names = "q k v alpha beta gamma".split()[: len(leaves)]
    assert_matches_reference(kernel_args, leaves, names, causal, mask, tolerance({dtype}, device))


@slow_on_cpu
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("causal,pads", [(True, (5, 12)), (False, (0, 17))], ids=["causal-left", "bidir-all-pad"])
def test_rows_that_see_no_key_are_alpha_v_and_finite(device, dt, causal, pads):
    """Causal with left padding: the leading pad rows see no key; an all-padding sequence: no row does.
    By the kernel's contract their A and C rows are zero: the output row is alpha V, nothing is NaN."""
    T, dtype = 17, DTYPES[dt]
    skip_unless_runs({dtype})
    (q, k, v), (a, b, g) = make_inputs(T, 32, device, (dtype,) * 3)
    mask = torch.ones(B, T, dtype=torch.bool, device=device)
    for i, n in enumerate(pads):
        mask[i, :n] = False
    tol = tolerance({dtype}, device)
    out, grads = assert_matches_reference(
        kernel_args, [q, k, v, a, b, g], "q k v alpha beta gamma".split(), causal, mask, tol
    )
    assert out.isfinite().all() and all(x.isfinite().all() for x in grads)
    no_key = ~allowed(T, causal, mask, device).any(-1).expand(B, H, T)
    assert no_key.sum() == H * (pads[0] + pads[1] if causal else T)
    alpha_v = a.detach().view(1, H, 1, 1) * v.detach()
    assert rel_err(out.detach()[no_key], alpha_v[no_key].double()) <= tol


@slow_on_cpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("layout", ["split-heads", "fused-qkv-slice", "strided-last-dim"])
def test_non_contiguous_inputs(device, layout, causal):
    """The layouts callers pass: split_heads' transposed views of (B, T, H*D) activations (the model),
    slices of one fused (B, T, 3*H*D) projection, and a stride-2 last dimension. Gradients are
    checked on the underlying tensors."""
    # CPU: more than one tile in every kernel's grid (the dK/dV kernel's key tiles are 32 rows), the last
    # one partial: each kernel reads rows of every batch and head past its first tile through the strides.
    T, D = (300 if CUDA else 33), 32
    if layout == "split-heads":
        leaves = [randn(B, T, H * D, seed=i, device=device).requires_grad_() for i in range(3)]

        def views(xq, xk, xv, *gains):
            return (*(x.view(B, T, H, D).transpose(1, 2) for x in (xq, xk, xv)), *gains)
    elif layout == "fused-qkv-slice":
        leaves = [randn(B, T, 3 * H * D, seed=0, device=device).requires_grad_()]

        def views(x, *gains):
            return (*(x[..., i * H * D : (i + 1) * H * D].view(B, T, H, D).transpose(1, 2) for i in range(3)), *gains)
    else:
        leaves = [randn(B, H, T, 2 * D, seed=i, device=device).requires_grad_() for i in range(3)]

        def views(xq, xk, xv, *gains):
            return (xq[..., ::2], xk[..., 1::2], xv[..., ::2], *gains)

    _, gains = make_inputs(1, D, device)
    leaves += gains
    names = [f"x{i}" for i in range(len(leaves) - 3)] + ["alpha", "beta", "gamma"]
    assert not any(t.is_contiguous() for t in views(*leaves)[:3])
    mask = make_mask("right", T, device)
    assert_matches_reference(views, leaves, names, causal, mask, tolerance({torch.float32}, device))


QKV_GAIN_DTYPES = {
    "all-fp32": (torch.float32, torch.float32, torch.float32),
    "all-bf16": (torch.bfloat16, torch.bfloat16, torch.bfloat16),  # a model cast to bf16
    "qk-bf16-v-fp32": (torch.bfloat16, torch.float32, torch.float32),  # SAS under autocast: V = Norm(x)
    "qkv-bf16-gains-fp32": (torch.bfloat16, torch.bfloat16, torch.float32),  # v-skipinit under autocast
}


def _mixed_inputs(combo, T, D, device):
    qk_dtype, v_dtype, gain_dtype = QKV_GAIN_DTYPES[combo]
    (q, k, v), gains = make_inputs(T, D, device, (qk_dtype, qk_dtype, v_dtype))
    return [q, k, v] + [x.detach().to(gain_dtype).requires_grad_() for x in gains]


@slow_on_cpu
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's bf16 values
@pytest.mark.parametrize("combo", QKV_GAIN_DTYPES)
def test_output_dtype_follows_the_sdpa_path(device, combo):
    """The output dtype is the one ShapedAttention's sdpa path returns for the same tensors, i.e. the
    promotion of alpha * V + beta * A V - gamma C V with (1, H, 1, 1) gains: V's dtype unless the
    gains are wider. Each gradient has its input's dtype."""
    T = 17
    q, k, v, a, b, g = leaves = _mixed_inputs(combo, T, 32, device)
    mask = make_mask("right", T, device)
    gv = lambda x: x.view(1, H, 1, 1)  # noqa: E731
    with torch.no_grad():
        sdpa = torch.addcmul(gv(a) * v, gv(b), softmax_attention(q, k, v, True, mask, "sdpa"))
        sdpa = torch.addcmul(sdpa, -gv(g), centred_mean(v, True, mask))
    out = fused_shaped_attention(q, k, v, a, b, g, True, mask)
    assert out.dtype == sdpa.dtype, f"fused returns {out.dtype}, the sdpa path {sdpa.dtype}"
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    assert [x.dtype for x in grads] == [x.dtype for x in leaves]


# On the CPU the combinations test_fused_v3 checks on its irregular shapes (its "bf16": q, k, v bf16 with
# fp32 gains; "bf16-v-fp32": q, k bf16 with fp32 V and gains) are left to it; bf16 gains are checked here.
MIXED_ON_CPU = {"all-bf16"}


@slow_on_cpu
@pytest.mark.parametrize(
    "combo",
    [
        pytest.param(c, marks=[] if CUDA or c in MIXED_ON_CPU else [pytest.mark.skip(reason=ON_CPU)])
        for c in QKV_GAIN_DTYPES
        if c != "all-fp32"
    ],
)
def test_mixed_dtypes_match_float64_reference(device, combo):
    """Inputs in different dtypes (what autocast hands over): values and every gradient."""
    dtypes = set(QKV_GAIN_DTYPES[combo])
    skip_unless_runs(dtypes)
    # CPU: the gains' dtype is read once per program whatever T; two query tiles, the second partial.
    T = 300 if CUDA else 17
    leaves = _mixed_inputs(combo, T, 64, device)
    assert_matches_reference(
        kernel_args,
        leaves,
        "q k v alpha beta gamma".split(),
        True,
        make_mask("right", T, device),
        tolerance(dtypes, device),
    )


@needs_cuda
def test_cuda_memory_is_linear_in_T(device):
    peaks = []
    for T in (1024, 4096):
        (q, k, v), (a, b, g) = make_inputs(T, 64, device, (torch.bfloat16,) * 3)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fused_shaped_attention(q, k, v, a, b, g, True, None).sum().backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
    # 4x the tokens: a T x T buffer would cost 16x; O(T d) buffers cost 4x.
    assert peaks[1] / peaks[0] < 6


@slow_on_cpu
def test_centring_term_is_computed_not_dropped(device):
    """Guard: with gamma != 0 the output differs from the no-centring kernel by exactly gamma C V."""
    T = 40 if CUDA else 17  # CPU: two query tiles, the second's C V from VSUM's chunk row and its own rows
    (q, k, v), (a, b, g) = make_inputs(T, 32, device)
    with torch.no_grad():
        diff = fused_shaped_attention(q, k, v, a, b, None, True, None) - fused_shaped_attention(
            q, k, v, a, b, g, True, None
        )
        want = g.double().view(1, -1, 1, 1) * (centring_matrix(T, True, None, device, torch.float64) @ v.double())
    assert rel_err(diff, want) <= tolerance({torch.float32}, device)


# ---------------------------------------------------------------------------------------------------
