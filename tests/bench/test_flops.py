"""FLOP counting: FlopCounterMode on a full forward + backward, CPU attention kernels included."""

import pytest
import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.bench.config import Shape, Variant
from blocklab.bench.flops import count_flops, step_flops

TINY = Shape(d_model=64, n_heads=4, d_ff=256, seq_len=32, n_layers=2, vocab_size=256, batch=2)


def test_linear_only_model_costs_six_n_flops_per_token():
    dims = [32, 64, 48, 16]
    model = nn.Sequential(*(nn.Linear(a, b, bias=False) for a, b in zip(dims, dims[1:])))
    n_params = sum(p.numel() for p in model.parameters())
    tokens = 10
    x = torch.randn(tokens, dims[0], requires_grad=True)  # so the first layer's input gradient is computed too
    total, per_op = count_flops(lambda: model(x).sum().backward())
    assert total == 6 * n_params * tokens
    assert set(per_op) == {"aten.mm"}


def test_sas_p_saves_exactly_the_removed_value_and_projection_matmuls():
    pre, sasp = step_flops(TINY, Variant("pre-ln"), "cpu"), step_flops(TINY, Variant("sas-p"), "cpu")
    L, d = TINY.n_layers, TINY.d_model
    # SAS-P drops W^V and W^P in every block but keeps W^V = I + dW in the first: (2L - 1) d^2 weights;
    # it also has one norm per block instead of two and gains alpha, beta, gamma per head, beta_SA, beta_FF.
    assert pre["params"] - sasp["params"] == (2 * L - 1) * d * d + d * L - (3 * TINY.n_heads + 2) * L
    assert pre["flops"] - sasp["flops"] == 6 * (2 * L - 1) * d * d * TINY.tokens


def test_fused_attention_is_counted_on_cpu():
    fused = step_flops(TINY, Variant("sas-p", attn_impl="sdpa"), "cpu")
    ref = step_flops(TINY, Variant("sas-p", attn_impl="materialized"), "cpu")
    B, T, d, L = TINY.batch, TINY.seq_len, TINY.d_model, TINY.n_layers
    attn = sum(v for k, v in fused["per_op"].items() if "attention" in k)
    assert attn > 0, fused["per_op"]
    # the same products, plus the fused backward's recomputation of Q K^T (2 B T^2 d per layer)
    assert fused["flops"] == ref["flops"] + 2 * B * T * T * d * L


def test_flops_ceiling_at_the_issue_shape_is_about_1_17():
    """SPEC section 9: FLOPs(pre-ln) / FLOPs(sas-p) is about 1.17 at d=768, 12 heads, MLP 3072, T=128, V=2048, L=6."""
    flops = {}
    for block in ("pre-ln", "sas-p"):
        with torch.device("meta"):  # shapes only: no memory, no arithmetic
            model = build_model(
                ModelConfig(
                    block=block, vocab_size=2048, d_model=768, n_layers=6, n_heads=12, d_ff=3072, max_seq_len=128
                )
            )
            x = torch.zeros(8, 128, dtype=torch.long)
        flops[block], _ = count_flops(lambda model=model, x=x: model(x, labels=x).loss.backward())
    assert flops["pre-ln"] / flops["sas-p"] == pytest.approx(1.17, abs=0.005)
