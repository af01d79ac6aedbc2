"""Which attention path runs: "auto" per device type, and what a model reports it ran."""
import pytest
import torch

from blocklab import build_model
from blocklab.attention.modules import AUTO_IMPL, attention_path, resolve_impl
from tests.helpers import small_cfg


def test_auto_is_the_measured_default_and_names_pass_through():
    # Issue 17: the fused kernel is not the CUDA default until it is measured faster and checked
    # correct on a GPU (benchmarks/RESULTS.md); the CPU's fastest correct path is sdpa.
    assert resolve_impl("auto", torch.device("cpu")) == "sdpa"
    assert resolve_impl("auto", torch.device("cuda")) == AUTO_IMPL["cuda"] == "sdpa"
    for name in ("sdpa", "fused", "materialized"):
        assert resolve_impl(name, torch.device("cuda")) == name


@pytest.mark.parametrize("block,impl,expected", [
    ("sas-p", "auto", "sdpa"), ("sas-p", "materialized", "materialized"), ("sas", "fused", "fused"),
    ("pre-ln", "fused", "sdpa"),  # softmax attention has no gains to fuse: SDPA's own kernels run
    ("pre-ln", "materialized", "materialized"), ("post-ln", "auto", "sdpa"),
])
def test_attention_path_names_what_the_model_runs(block, impl, expected):
    model = build_model(small_cfg(block, attn_impl=impl))
    assert attention_path(model, torch.device("cpu")) == expected
