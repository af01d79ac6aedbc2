import pytest
import torch

from blocklab.attention.fused import unavailable_reason
from tests.attention.fused_cases import DEVICE


@pytest.fixture(params=[DEVICE.type])
def device(request):
    """The device the kernel runs on here; the test id names it ([cuda-...] or [cpu-...])."""
    reason = unavailable_reason(torch.device(request.param))
    if reason is not None:
        pytest.skip(reason)
    return torch.device(request.param)
