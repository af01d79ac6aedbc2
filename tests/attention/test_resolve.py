"""Which attention path runs: "auto" per device type, and what a model reports it ran."""

import pytest
import torch

from blocklab import build_model
from blocklab.attention import modules
from blocklab.attention.modules import AUTO_IMPL, attention_path, resolve_impl
from tests.helpers import small_cfg


def test_auto_is_the_measured_default_and_names_pass_through():
    # CPU: sdpa is the fastest correct path. CUDA: the fused kernel, measured faster and checked
    # correct with autotuning on an H100 (benchmarks/RESULTS.md), for 16-bit inputs only.
    for dtype in (torch.float32, torch.bfloat16):
        assert resolve_impl("auto", torch.device("cpu"), dtype) == "sdpa"
    assert AUTO_IMPL["cuda"] == "fused"
    for name in ("sdpa", "fused", "materialized"):
        assert resolve_impl(name, torch.device("cuda"), torch.float32) == name


@pytest.mark.skipif(modules.fused_unavailable(torch.device("cuda")) is not None, reason="needs triton installed")
def test_auto_on_cuda_runs_the_kernel_for_16_bit_inputs_and_keeps_fp32_exact():
    cuda = torch.device("cuda")
    assert resolve_impl("auto", cuda, torch.bfloat16) == "fused"
    assert resolve_impl("auto", cuda, torch.float16) == "fused"
    # The kernel computes fp32 in TF32; an fp32 run asked for fp32 and keeps the exact path.
    assert resolve_impl("auto", cuda, torch.float32) == "sdpa"


def test_auto_falls_back_to_sdpa_where_the_kernel_cannot_run(monkeypatch):
    monkeypatch.setattr(modules, "fused_unavailable", lambda device: "no triton")
    assert resolve_impl("auto", torch.device("cuda"), torch.bfloat16) == "sdpa"


@pytest.mark.parametrize(
    "block,impl,expected",
    [
        ("sas-p", "auto", "sdpa"),
        ("sas-p", "materialized", "materialized"),
        ("sas", "fused", "fused"),
        ("pre-ln", "fused", "sdpa"),  # softmax attention has no gains to fuse: SDPA's own kernels run
        ("pre-ln", "materialized", "materialized"),
        ("post-ln", "auto", "sdpa"),
    ],
)
def test_attention_path_names_what_the_model_runs(block, impl, expected):
    model = build_model(small_cfg(block, attn_impl=impl))
    assert attention_path(model, torch.device("cpu")) == expected


def test_attention_path_follows_the_run_precision_on_cuda(monkeypatch):
    monkeypatch.setattr(modules, "fused_unavailable", lambda device: None)
    model = build_model(small_cfg("sas-p"))
    assert attention_path(model, torch.device("cuda"), torch.bfloat16) == "fused"
    assert attention_path(model, torch.device("cuda"), torch.float32) == "sdpa"
