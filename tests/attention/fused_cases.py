"""Shared by the fused-kernel tests: the device the kernel runs on, the float64 reference, inputs,
masks and tolerances (see test_fused.py's docstring for the method)."""

import contextlib
import dataclasses
import functools
import inspect
import math
import os

import pytest
import torch

from blocklab.attention.centring import allowed, centring_matrix
from blocklab.attention.fused import fused_shaped_attention, triton

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
ON_CPU = "interpreter: covered on CUDA"
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the CPU runs the kernels through the interpreter)")
# On the CPU every kernel call is interpreted, seconds each: tests that run the kernel are `slow` there
# (make test runs them, make test-fast does not), but for a few cases that test-fast keeps.
slow_on_cpu = pytest.mark.slow if not CUDA else (lambda f: f)  # on CUDA: an ordinary test


if triton is not None:
    import triton.language as tl

    from blocklab.attention import fused_kernels as fk

    @triton.jit
    def _bf16_probe(X, W, Y, N: tl.constexpr):
        o = tl.arange(0, N)
        x = fk._op(tl.load(X + o[:, None] * N + o[None, :]), tl.bfloat16)  # a bf16 input
        w = fk._op(tl.load(W + o[:, None] * N + o[None, :]), tl.bfloat16)  # an fp32 value rounded to bf16
        tl.store(Y + o[:, None] * N + o[None, :], tl.dot(x, w) + x.to(tl.float32) * 2.0)


@contextlib.contextmanager
def lean_interpreter():
    """Triton's interpreter without two costs that check nothing: the same kernels, values and checks
    in about half the CPU time (the tests that interpret the kernels run under it).

    - The repeated patching of triton.language. A launch patches tl's builtins for interpretation
      (`_patch_lang`: an `inspect.getmembers` walk over tl, tl.core, tl.math and tl.tensor, ~4 ms),
      and Triton 3.9 patches them again, to equivalent functions, at every call of a @triton.jit
      helper inside the kernel (`_op`, `_rows`, tl.sum and the like: hundreds per launch, a third of
      the interpreter's time), never undoing a helper's patch before the launch ends. Here a helper
      patches only the modules this launch has not patched yet (tl.core, first reached through
      tl.sum's globals). Were a later Triton to undo a helper's patches when it returns, the next
      helper would meet unpatched builtins, which raise: no silent change.
    - The integer-overflow sanitizer. Every int32 add, sub and mul is redone in int64 and compared
      with the int32 range, and the result goes to `device_assert`, which does nothing unless the
      builder's `debug` option is set (the interpreter's never is): a quarter of the remaining time
      for a check that cannot fire. It stays on wherever `debug` is set.
    Without the interpreter this does nothing."""
    if triton is None or os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    import triton.language as tl
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if not (
        hasattr(interpreter, "_patch_lang")
        and hasattr(interpreter, "_LangPatchScope")
        and dataclasses.is_dataclass(options)
        and hasattr(options, "sanitize_overflow")
    ):  # another Triton than the one these internals were read from: the plain, slower interpreter
        yield
        return
    original = interpreter._patch_lang
    patched = []  # the running launch's patched modules (ids); empty between launches

    @functools.cache
    def lang_modules(fn) -> frozenset:
        return frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))

    def patch_lang(fn):
        langs = lang_modules(fn)
        if patched:  # a helper's call within a launch
            if langs <= patched[-1]:
                return interpreter._LangPatchScope()  # already patched; nothing to undo
            patched[-1] |= langs
            return original(fn)  # never restored, as in Triton: it holds until the launch restores
        scope = original(fn)  # the launch's own patch, which the launch restores
        patched.append(set(langs))
        restore = scope.restore

        def restore_and_end():
            patched.pop()
            restore()

        scope.restore = restore_and_end
        return scope

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interpreter, "_patch_lang", patch_lang)
        if not builder.options.debug:
            mp.setattr(builder, "options", dataclasses.replace(builder.options, sanitize_overflow=False))
        yield


@functools.cache
def interpreter_bf16_reason() -> str | None:
    """None where bf16 kernel arithmetic can be checked here; else why not.

    Triton's interpreter stores bf16 as raw uint16 and, in the versions we have seen (3.9), does its
    arithmetic and tl.dot on those integers: loads, stores and casts to fp32 are right but a bf16 dot is
    garbage. The kernels therefore take every dot operand through `fused_kernels._op`, which under the
    interpreter (only) rounds a bf16 operand to nearest and keeps it in fp32: a product of two such
    values is exact, so the interpreted dot is the tensor core's bf16 x bf16 -> fp32 dot, and every
    other bf16 value is converted to fp32 before arithmetic. Probed rather than assumed: `_op`'s operands
    must give torch's bf16-operand product, so an interpreter that breaks bf16 differently, or kernels
    that stop emulating it, bring the skip back.
    """
    if CUDA or triton is None or os.environ.get("TRITON_INTERPRET") != "1":
        return None
    x, w = torch.randn(16, 16).bfloat16(), torch.randn(16, 16)
    y = torch.empty(16, 16)
    try:
        _bf16_probe[(1,)](x, w, y, N=16)
        if torch.allclose(y, x.float() @ w.bfloat16().float() + 2 * x.float(), rtol=1e-5, atol=1e-5):
            return None
    except Exception:  # noqa: BLE001 - an interpreter that refuses bf16 is as unusable as a wrong one
        pass
    return f"the Triton {triton.__version__} interpreter does not emulate bf16 arithmetic: covered on CUDA"


def skip_unless_runs(dtypes):
    """Skip a value check with bf16 kernel inputs where only the interpreter would run it, wrongly."""
    if torch.bfloat16 in set(dtypes) and interpreter_bf16_reason() is not None:
        pytest.skip(interpreter_bf16_reason())


def tolerance(dtypes, device) -> float:
    """Largest accepted max|got - ref| / max(1, max|ref|) of a tensor, for kernel inputs of `dtypes`."""
    if torch.bfloat16 in dtypes:
        # bf16 keeps 8 mantissa bits (eps 2^-8 = 3.9e-3, rounding 2^-9): P and dS are rounded to bf16
        # before their tensor-core dots and every output and gradient is stored in bf16, each ~2e-3
        # relative. The accumulators are fp32, so these roundings add up over T like a random walk
        # against a sum that grows the same way: the relative error stays a few eps (a pure-torch
        # emulation that rounds P, A V and the outputs to bf16 peaks at 1.0e-2, at T = 1000, D = 128),
        # and 3e-2 (~8 eps) leaves room without letting a wrong mask or a dropped term (errors of
        # order 1) through.
        return 3e-2
    if torch.float16 in dtypes:
        # fp16 (the 16-bit dtype the interpreter computes natively) rounds where bf16 does, with 11
        # significant bits instead of 8 (eps 2^-10 = 9.8e-4): the same error terms, 8x smaller in theory;
        # measured 1/4 to 1/6 of bf16's on test_fused_v3's shapes (worst 1.2e-3 against bf16's 6.0e-3).
        # bf16's bound / 5: ~6 eps, still far below a wrong mask's or a dropped term's error (>= 0.08).
        return 6e-3
    if device.type == "cuda":
        # fp32 inputs run their dots on TF32 tensor cores (10-bit mantissa, operands rounded to
        # 2^-11 = 4.9e-4): a dot of D terms is off by ~1e-3 relative, and the softmax, the output
        # and every gradient inherit that order (an emulation that rounds every dot operand and
        # incoming gradient to TF32 peaks at 1.4e-3 over this file's shapes). 5e-3 is ~10 TF32 roundings.
        return 5e-3
    # The interpreter runs tl.dot as exact fp32 numpy products (no TF32): fp32 rounding (2^-24) summed
    # over at most a few hundred terms stays near 1e-6 (7e-7 seen). 1e-5 keeps a 10x margin and still
    # catches a stray bf16 cast or TF32 dot (errors >= 1e-3).
    return 1e-5


# ---------------------------------------------------------------------------------------------------
# Inputs and the float64 reference

B, H = 2, 3  # B != H: a mix-up of batch and head indices cannot cancel out
MASKS = ("none", "right", "left", "broadcast")


def make_mask(kind: str, T: int, device):
    """None, or a key mask with True (or 1) = real token.

    right/left: per-sequence padding of T//4 and (T+1)//2 tokens at the end/start, so T=1 makes the
    second sequence all padding; right is an int mask (as data loaders make it), left a bool one.
    broadcast: one (1, T) row for the whole batch, with holes inside the sequence (every third key).
    """
    if kind == "none":
        return None
    if kind == "broadcast":
        return (torch.arange(T, device=device) % 3 != 1)[None]
    mask = torch.ones(B, T, dtype=torch.long if kind == "right" else torch.bool, device=device)
    for b, n in enumerate((T // 4, (T + 1) // 2)):
        if n:
            (mask[b, T - n :] if kind == "right" else mask[b, :n]).fill_(0)
    return mask


def randn(*shape, seed, device, dtype=torch.float32):
    """Seeded on the CPU generator (the same values on every machine), stored on `device`."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def make_inputs(T, D, device, dtypes=(torch.float32,) * 3, centred=True, seed=0):
    """q, k, v leaves of shape (B, H, T, D) in `dtypes`, and the gains alpha, beta, gamma (fp32, (H,))."""
    qkv = [randn(B, H, T, D, seed=seed + i, device=device, dtype=dt).requires_grad_() for i, dt in enumerate(dtypes)]
    g = torch.Generator().manual_seed(seed + 10)
    gains = [(torch.rand(H, generator=g) + 0.5).to(device).requires_grad_() for _ in range(3)]
    if not centred:
        gains[2] = None
    return qkv, gains


def reference(q, k, v, alpha, beta, gamma, causal, key_mask):
    """(alpha I + beta A - gamma C) V in float64 with every T x T matrix formed.

    A row that may see no key gets finite logits and then a zero row of A, so its output is alpha V
    and every gradient stays finite (softmax over an all -inf row would be NaN).
    """
    q, k, v = (t.double() for t in (q, k, v))
    T, D = q.shape[-2:]
    ok = allowed(T, causal, key_mask, q.device)  # (B|1, 1, T, T)
    seen = ok.any(-1, keepdim=True)  # rows with at least one key
    s = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    s = s.masked_fill(~ok, float("-inf")).masked_fill(~seen, 0.0)
    a = s.softmax(-1) * seen
    g = lambda x: x.double().view(1, -1, 1, 1)  # noqa: E731
    m = g(alpha) * torch.eye(T, dtype=torch.float64, device=q.device) + g(beta) * a
    if gamma is not None:
        m = m - g(gamma) * centring_matrix(T, causal, key_mask, q.device, torch.float64)
    return m @ v


def rel_err(got, ref) -> float:
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1.0)).item()


def assert_matches_reference(fn, leaves, names, causal, key_mask, tol, seed=99):
    """fn(*leaves) -> (q, k, v, alpha, beta, gamma) is fed to the kernel and, on float64 copies of the
    leaves, to the reference; the output and the gradient of every leaf must agree within `tol`.
    Returns the kernel's output and gradients."""
    args = fn(*leaves)
    out = fused_shaped_attention(*args, causal, key_mask)
    ref_leaves = [x.detach().double().requires_grad_() for x in leaves]
    ref = reference(*fn(*ref_leaves), causal, key_mask)
    assert out.shape == ref.shape
    grad_out = randn(*out.shape, seed=seed, device=out.device, dtype=out.dtype)  # what the kernel gets, exactly
    got = torch.autograd.grad(out, leaves, grad_out)
    want = torch.autograd.grad(ref, ref_leaves, grad_out.double())
    errors = {"out": rel_err(out, ref)}
    errors.update({f"d{n}": rel_err(x, y) for n, x, y in zip(names, got, want)})
    bad = {n: e for n, e in errors.items() if not e <= tol}  # a NaN fails too
    assert not bad, f"relative error above {tol:g} (NaN = non-finite values): {bad}; all: {errors}"
    return out, got


def kernel_args(q, k, v, a, b, g=None):
    return q, k, v, a, b, g


# ---------------------------------------------------------------------------------------------------
# The reference itself
