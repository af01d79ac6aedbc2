"""No buffer of the fused kernels may rely on its initial content.

Triton's autotuner runs every candidate tile size inside the first call and keeps what the last
one wrote. Issue 17 measured what happens otherwise: the d_alpha/d_gamma partial sums were zeroed
once and indexed by key tile, a smaller candidate tile left slots that the chosen one never
overwrote, and on an H100 the first call at T=300 had those gradients off by up to 0.56. Here
every buffer the launcher allocates starts as NaN; an element no kernel writes then shows.
"""

import pytest
import torch

from blocklab.attention import fused
from blocklab.attention.fused import fused_shaped_attention, unavailable_reason
from tests.attention.fused_cases import slow_on_cpu

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = [
    pytest.mark.skipif(
        unavailable_reason(torch.device(DEVICE)) is not None,
        reason="the fused kernel needs CUDA or TRITON_INTERPRET=1 with triton installed",
    ),
    slow_on_cpu,
]


def _grads(causal, mask):
    g = torch.Generator().manual_seed(3)
    B, H, T, D = 2, 3, 37, 16  # several 16/32-row tiles under the interpreter, partial last tiles
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(DEVICE).requires_grad_() for _ in range(3))
    gains = [(torch.rand(H, generator=g) + 0.5).to(DEVICE).requires_grad_() for _ in range(3)]
    out = fused_shaped_attention(q, k, v, *gains, causal, mask)
    grad_out = torch.randn(out.shape, generator=g).to(DEVICE)
    return (out.detach(), *torch.autograd.grad(out, [q, k, v, *gains], grad_out))


@pytest.mark.parametrize("causal,padded", [(True, False), (False, False), (True, True)])
def test_outputs_do_not_depend_on_what_the_buffers_held(monkeypatch, causal, padded):
    mask = None
    if padded:
        mask = torch.ones(2, 37, dtype=torch.bool, device=DEVICE)
        mask[0, :5] = False
        mask[1, 20:] = False
    clean = _grads(causal, mask)

    def poisoned(make):
        def fill(*a, **kw):
            t = make(*a, **kw)
            return t.fill_(float("nan")) if t.is_floating_point() else t  # the kernels' buffers are float

        return fill

    for name in ("new_empty", "new_zeros"):
        monkeypatch.setattr(torch.Tensor, name, poisoned(getattr(torch.Tensor, name)))
    monkeypatch.setattr(fused.torch, "empty_like", poisoned(torch.empty_like))
    dirty = _grads(causal, mask)
    for what, a, b in zip("out dq dk dv dalpha dbeta dgamma".split(), clean, dirty):
        assert torch.isfinite(b).all(), f"{what}: an element no kernel wrote"
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=what)


AUTOTUNED_FIRST_CALL = """
import torch
from blocklab.attention.fused import fused_shaped_attention
from tests.attention.test_fused_buffers import reference_grads
worst = 0.0
for T in (300, 1000):
    for causal, padded in ((True, False), (False, True)):
        got, want = reference_grads(T, causal, padded)
        worst = max([worst] + [((a.double() - b).abs().max() / max(1.0, b.abs().max())).item() for a, b in zip(got, want)])
print(worst)
"""


def reference_grads(T, causal, padded):
    """Output and gradients of the fused kernel (bf16 q, k; fp32 V, as under autocast) and of the
    materialised formula in float64, on the same inputs."""
    from blocklab.attention.centring import centring_matrix
    from blocklab.attention.functional import attention_matrix

    g = torch.Generator().manual_seed(T)
    B, H, D = 2, 12, 64
    x64 = [torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(DEVICE) for _ in range(3)]
    g64 = [(torch.rand(H, generator=g, dtype=torch.float64) + 0.5).to(DEVICE) for _ in range(3)]
    mask = None
    if padded:
        mask = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
        mask[1, T // 3 :] = False
    low = [t.to(dt).requires_grad_() for t, dt in zip(x64 + g64, [torch.bfloat16] * 2 + [torch.float32] * 4)]
    ref = [t.clone().requires_grad_() for t in x64 + g64]
    out = fused_shaped_attention(*low, causal, mask)
    q, k, v, a, b, c = ref
    m = (
        a.view(1, H, 1, 1) * torch.eye(T, dtype=torch.float64, device=DEVICE)
        + b.view(1, H, 1, 1) * attention_matrix(q, k, causal, mask)
        - c.view(1, H, 1, 1) * centring_matrix(T, causal, mask, DEVICE, torch.float64)
    )
    want = m @ v
    grad_out = torch.randn(want.shape, generator=g, dtype=torch.float64).to(DEVICE)
    got = (out.detach(), *torch.autograd.grad(out, low, grad_out.to(out.dtype)))
    return got, (want.detach(), *torch.autograd.grad(want, ref, grad_out))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="autotuning times its candidates on a GPU")
def test_autotuned_first_call_is_correct():
    """The call that autotunes (every candidate tile runs on the same buffers) returns the right
    gradients: a fresh process, so no shape has been tuned before. bf16 tolerance as test_fused."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "BLOCKLAB_FUSED_AUTOTUNE"}
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, "-c", AUTOTUNED_FIRST_CALL], capture_output=True, text=True, env=env, cwd=root, timeout=900
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert float(r.stdout.split()[-1]) < 3e-2
