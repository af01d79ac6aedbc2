"""The shared layers: RMSNorm's mixed-precision path."""

import warnings

import torch
import torch.nn.functional as F

from blocklab.layers import RMSNorm


def _composite(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm written out in fp32 and rounded to x's type: what the unfused path computes."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def test_a_bf16_input_with_an_fp32_gain_takes_the_fused_kernel_and_keeps_the_numbers():
    torch.manual_seed(0)
    norm = RMSNorm(512)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(512))
    x = (torch.randn(8, 16, 512) * 7).bfloat16().requires_grad_()
    with warnings.catch_warnings():
        # F.rms_norm warns "Mismatch dtype ... Cannot dispatch to fused implementation" on its slow path.
        warnings.simplefilter("error")
        y = norm(x)
    assert y.dtype == torch.bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unfused = F.rms_norm(x, (512,), norm.weight, norm.eps)
    assert torch.equal(y, unfused)
    assert (y.float() - _composite(x, norm.weight, norm.eps).float()).abs().max() <= 0.0625
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, norm.weight), g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.autograd.grad(F.rms_norm(x, (512,), norm.weight, norm.eps), (x, norm.weight), g)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_same_precision_inputs_are_unchanged():
    torch.manual_seed(1)
    norm = RMSNorm(64, eps=1e-6)
    x = torch.randn(4, 64)
    assert torch.equal(norm(x), F.rms_norm(x, (64,), norm.weight, 1e-6))
