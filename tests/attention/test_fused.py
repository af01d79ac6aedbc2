"""The fused Triton shaped attention equals the materialised formula, forward and every gradient.

Without a GPU the kernels run through Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), so CI checks the same kernel code that runs on CUDA, at small shapes.
"""
import pytest
import torch

from blocklab import build_model
from blocklab.attention.centring import centring_matrix
from blocklab.attention.functional import attention_matrix
from blocklab.attention.fused import fused_shaped_attention, triton, unavailable_reason
from blocklab.attention.modules import resolve_impl
from tests.helpers import randomize, small_cfg

CUDA = torch.cuda.is_available()
needs_kernel = pytest.mark.skipif(unavailable_reason(torch.device("cuda" if CUDA else "cpu")) is not None,
                                  reason="the fused kernel needs CUDA or TRITON_INTERPRET=1 with triton installed")
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the CPU runs these kernels through the interpreter)")


def reference(q, k, v, a, b, g, causal, key_mask):
    """(alpha I + beta A - gamma C) V with every T x T matrix formed."""
    T, H = q.shape[-2], q.shape[1]
    m = a.view(1, H, 1, 1) * torch.eye(T, dtype=q.dtype, device=q.device)
    m = m + b.view(1, H, 1, 1) * attention_matrix(q, k, causal, key_mask)
    if g is not None:
        m = m - g.view(1, H, 1, 1) * centring_matrix(T, causal, key_mask, q.device, q.dtype)
    return m @ v


def _inputs(causal, padded, centred, T=37, D=16, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(7)
    B, H = 2, 3
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    gains = [(torch.rand(H, generator=g) + 0.5).to(device).requires_grad_() for _ in range(3)]
    if not centred:
        gains[2] = None
    mask = None
    if padded:  # right padding of different lengths, as the MLM batches make
        mask = torch.ones(B, T, dtype=torch.bool, device=device)
        mask[0, T - 5:] = False
        mask[1, T // 2:] = False
    return q, k, v, gains, mask


@needs_kernel
@pytest.mark.parametrize("centred", [True, False], ids=["sas", "no-centring"])
@pytest.mark.parametrize("causal,padded", [(True, False), (False, False), (False, True), (True, True)],
                         ids=["causal", "bidirectional", "padded", "causal-padded"])
def test_kernel_matches_reference_forward_and_every_gradient(causal, padded, centred):
    # T=37 is not a multiple of the 32-wide blocks: the boundary masks are exercised.
    q, k, v, (a, b, g), mask = _inputs(causal, padded, centred)
    leaves = [t for t in (q, k, v, a, b, g) if t is not None]
    out = fused_shaped_attention(q, k, v, a, b, g, causal, mask)
    ref = reference(q, k, v, a, b, g, causal, mask)
    grad_out = torch.randn_like(ref)
    got = torch.autograd.grad(out, leaves, grad_out)
    want = torch.autograd.grad(ref, leaves, grad_out)
    assert (out - ref).abs().max() < 1e-5
    for name, x, y in zip("q k v alpha beta gamma".split(), got, want):
        assert (x - y).abs().max() <= 1e-5 * max(1.0, y.abs().max().item()), name


@needs_kernel
def test_centring_term_is_computed_not_dropped():
    """Guard: with gamma != 0 the output differs from the no-centring kernel by exactly gamma C V."""
    q, k, v, (a, b, g), _ = _inputs(True, False, True)
    with torch.no_grad():
        diff = fused_shaped_attention(q, k, v, a, b, None, True, None) - fused_shaped_attention(q, k, v, a, b, g, True, None)
        cv = centring_matrix(q.shape[-2], True, None) @ v
    torch.testing.assert_close(diff, g.view(1, -1, 1, 1) * cv, atol=1e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("block", ["sas", "sas-p", "sas-p-nonorm", "v-skipinit", "shaped-vp"])
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_models_fused_equal_materialized(block, task):
    """Whole models on random (not init) parameters: logits, loss and every parameter gradient."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 97, (2, 21), generator=g)
    labels = torch.randint(0, 97, (2, 21), generator=g)
    mask = None
    if task == "mlm":
        mask = torch.ones(2, 21, dtype=torch.long)
        mask[1, 13:] = 0
        labels[1, 13:] = -100
    results = []
    for impl in ("fused", "materialized"):
        torch.manual_seed(1)
        model = randomize(build_model(small_cfg(block, task, attn_impl=impl)), seed=3, scale=0.1)
        out = model(ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        results.append((out.logits, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (lf, gf), (lm, gm) = results
    assert (lf - lm).abs().max() <= 2e-5 * max(1.0, lm.abs().max().item())
    assert gf.keys() == gm.keys()
    for n in gm:
        assert (gf[n] - gm[n]).abs().max() <= 2e-5 * max(1.0, gm[n].abs().max().item()), n


def test_fused_on_cpu_without_the_interpreter_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = build_model(small_cfg("sas-p", attn_impl="fused"))
    with pytest.raises(ValueError, match="attn_impl='fused'.*sdpa"):
        model(torch.zeros(1, 8, dtype=torch.long))


def test_auto_is_sdpa_on_cpu_and_fused_on_cuda_when_triton_is_there():
    assert resolve_impl("auto", torch.device("cpu")) == "sdpa"
    expected = "fused" if unavailable_reason(torch.device("cuda")) is None else "sdpa"
    assert resolve_impl("auto", torch.device("cuda")) == expected
    for name in ("sdpa", "fused", "materialized"):
        assert resolve_impl(name, torch.device("cpu")) == name


@needs_cuda
@pytest.mark.parametrize("causal,padded", [(True, False), (False, True)])
def test_cuda_bf16_close_to_fp32_reference(causal, padded):
    q, k, v, (a, b, g), mask = _inputs(causal, padded, True, T=300, D=64, device="cuda")
    ref = reference(*(t.double() for t in (q, k, v)), a.double(), b.double(), g.double(), causal, mask)
    out = fused_shaped_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), a, b, g, causal, mask)
    assert (out.double() - ref).abs().max() < 3e-2 * ref.abs().max()


@needs_cuda
def test_cuda_memory_is_linear_in_T():
    peaks = []
    for T in (1024, 4096):
        q, k, v, (a, b, g), _ = _inputs(True, False, True, T=T, D=64, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fused_shaped_attention(q, k, v, a, b, g, True, None).sum().backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
    # 4x the tokens: a T x T buffer would cost 16x; O(T d) buffers cost 4x.
    assert peaks[1] / peaks[0] < 6


@pytest.mark.skipif(triton is None, reason="needs the triton package")
def test_kernels_lower_to_h100_binaries():
    """The interpreter never lowers the kernels: build them for sm_90 with triton's bundled ptxas."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "compile_fused_sm90.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert r.stdout.count("cubin") == 3
