"""sdpa and materialized paths agree on random parameters, forward and backward (SPEC section 2).

float64 shows the two formulas are the same function (agreement to 1e-9); float32 shows
the default dtype stays within rounding relative to each tensor's scale.
"""
import pytest
import torch

from blocklab import BLOCKS, build_model
from tests.helpers import randomize, small_cfg

TOL = {torch.float64: 1e-9, torch.float32: 2e-5}
# Random weights far from init in float64; milder in float32, where a norm-free stack
# with large random weights amplifies rounding beyond what "rounding" should mean.
SCALE = {torch.float64: 0.3, torch.float32: 0.1}


def _run(block, task, impl, ids, mask, labels, dtype):
    torch.manual_seed(1)
    model = randomize(build_model(small_cfg(block, task, attn_impl=impl)), seed=3, scale=SCALE[dtype]).to(dtype)
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits, {n: p.grad for n, p in model.named_parameters()}


def close(a, b, tol):
    return (a - b).abs().max().item() <= tol * max(1.0, a.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block", BLOCKS + ("softmax-noskip",))
@pytest.mark.parametrize("task,padded", [("clm", False), ("mlm", False), ("mlm", True)])
def test_fused_and_materialized_agree(block, task, padded, dtype):
    ids = torch.randint(0, 97, (2, 16))
    mask = None
    labels = torch.randint(0, 97, (2, 16))
    if padded:
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[0, 11:] = 0
        labels = labels.masked_fill(mask == 0, -100)
    la, ga = _run(block, task, "sdpa", ids, mask, labels, dtype)
    lb, gb = _run(block, task, "materialized", ids, mask, labels, dtype)
    real = slice(None) if mask is None else mask.bool()
    assert close(la[real], lb[real], TOL[dtype])
    for name in ga:
        assert ga[name] is not None, name
        assert close(ga[name], gb[name], TOL[dtype]), name


def test_sdpa_path_never_builds_a_T_by_T_tensor(monkeypatch):
    """The default shaped path must not call the materialised helpers."""
    import blocklab.attention.modules as mod

    def boom(*a, **k):
        raise AssertionError("materialised attention used on the sdpa path")

    monkeypatch.setattr(mod, "attention_matrix", boom)
    monkeypatch.setattr(mod, "centring_matrix", boom)
    for block in ("sas", "sas-p", "shaped-vp", "v-skipinit"):
        model = build_model(small_cfg(block))
        model(torch.randint(0, 97, (1, 16))).logits.sum().backward()


def test_cpu_bf16_autocast_runs_the_flash_kernel_in_fp32(monkeypatch):
    """The CPU flash backward is 3-4x slower in bf16; autocast must not undo the fp32 upcast."""
    import blocklab.attention.functional as fn

    seen, real = [], fn.F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append(q.dtype)
        return real(q, k, v, **kw)

    monkeypatch.setattr(fn.F, "scaled_dot_product_attention", spy)
    for block in ("pre-ln", "sas-p"):
        model = build_model(small_cfg(block))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(torch.randint(0, 97, (2, 16))).logits
        assert out.dtype == torch.bfloat16  # the rest of the model does run in bf16
    assert seen and all(d == torch.float32 for d in seen)
