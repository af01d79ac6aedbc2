"""FLOP counting: FlopCounterMode on a full forward + backward, CPU attention kernels included."""

from dataclasses import replace

import pytest
import torch
import torch.nn as nn

from blocklab import ModelConfig, build_model
from blocklab.attention.modules import fused_unavailable
from blocklab.bench.config import SHAPES, Shape, Variant
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


def hand_count(shape: Shape, block: str, logits: bool = False, recompute: bool = True) -> int:
    """FLOPs of one training step by hand: matrix products 2mnk, forward + backward = 3x the forward.

    Weights per block: pre-ln W^Q, W^K, W^V, W^P and the MLP; sas-p W^Q, W^K and the MLP, plus W^V = I + dW
    in its first block. The tied head: forward, dX and dW (6 d V per token), plus 2 d V where the step also
    forms the (B, T, V) logits (`logits`: a plain forward does; training and the benchmark's step do not). Attention, counted full
    T x T as FlopCounterMode does: forward Q K^T and A V (4 T d per token), backward 8 T d, or 10 T d where
    the kernel recomputes Q K^T (`recompute`: flash SDPA and the fused kernel; not the math decomposition).
    Not counted, by anyone: norms, softmax, residual adds, SAS's O(d)-per-token epilogue."""
    d, f, L, V, T, B = shape.d_model, shape.d_ff, shape.n_layers, shape.vocab_size, shape.seq_len, shape.batch
    per_block = {"pre-ln": 4 * d * d + 2 * d * f, "sas-p": 2 * d * d + 2 * d * f}[block]
    weights = L * per_block + (d * d if block == "sas-p" else 0)
    head = 6 * d * V + (2 * d * V if logits else 0)
    attention = L * (4 + (10 if recompute else 8)) * B * T * T * d
    return B * T * (6 * weights + head) + attention


@pytest.mark.parametrize("block", ["pre-ln", "sas-p"])
def test_the_step_count_is_the_hand_count(block):
    assert step_flops(TINY, Variant(block), "cpu")["flops"] == hand_count(TINY, block)


@pytest.mark.skipif(
    torch.cuda.is_available() or fused_unavailable(torch.device("cpu")) is not None,
    reason="the fused kernel through Triton's interpreter (CPU, TRITON_INTERPRET=1, triton installed)",
)
def test_the_fused_op_counts_what_the_sdpa_path_counts():
    """It was counted zero (no formula for a custom op): the whole attention, not only the centring term."""
    fused = step_flops(TINY, Variant("sas-p", attn_impl="fused"), "cpu")
    assert fused["flops"] == step_flops(TINY, Variant("sas-p", attn_impl="sdpa"), "cpu")["flops"]
    assert fused["flops"] == hand_count(TINY, "sas-p")
    attention = {k: v for k, v in fused["per_op"].items() if not k.startswith("aten.")}
    B, T, d, L = TINY.batch, TINY.seq_len, TINY.d_model, TINY.n_layers
    assert attention == {
        "blocklab.shaped_attention": 4 * L * B * T * T * d,
        "blocklab.shaped_attention_backward": 10 * L * B * T * T * d,
    }


def test_the_counter_at_the_he_codeparrot_shape_is_the_hand_count():
    """On the meta device (shapes only) SDPA decomposes into the math formula: no recomputation.

    Two of the shape's 18 layers: the count is linear in the depth, two layers hold SAS-P's first block (its
    extra W^V) and a later one, and each traced layer costs the counter's per-op dispatch, not arithmetic.
    The full 18-layer numbers are the hand count's (the next test)."""
    shape = replace(SHAPES["he-codeparrot"], batch=1, n_layers=2)
    for block in ("pre-ln", "sas-p"):
        with torch.device("meta"):
            model = build_model(shape.model_config(block))
            x = torch.zeros(1, shape.seq_len, dtype=torch.long)
        total, _ = count_flops(lambda model=model, x=x: model(x, labels=x).loss.backward())
        assert total == hand_count(shape, block, logits=True, recompute=False)


def test_the_flops_ceiling_at_the_he_codeparrot_shape():
    """benchmarks/RESULTS.md: Pre-LN's FLOPs over SAS-P's at d=768, 12 heads, MLP 3072, T=128, 18 layers, V=50,000."""
    shape = SHAPES["he-codeparrot"]

    def ratio(**kw):
        return hand_count(shape, "pre-ln", **kw) / hand_count(shape, "sas-p", **kw)

    tokens = shape.batch * shape.seq_len
    assert hand_count(shape, "pre-ln") / tokens == 1_019_584_512
    assert hand_count(shape, "sas-p") / tokens == 895_721_472
    assert ratio() == pytest.approx(1.1383, abs=5e-5)  # a training step, and the benchmark's (flash SDPA, both paths)
    assert ratio(logits=True) == pytest.approx(1.1274, abs=5e-5)  # forming the logits too, as the benchmark once did
    assert ratio(recompute=False) == pytest.approx(1.1388, abs=5e-5)  # 6N + 12 L T d (MFU's)
    # what the counter said for the fused path before it had a formula for the op: SAS-P without attention
    attention = 14 * shape.n_layers * shape.batch * shape.seq_len**2 * shape.d_model
    stale = hand_count(shape, "pre-ln", logits=True) / (hand_count(shape, "sas-p", logits=True) - attention)
    assert stale == pytest.approx(1.1568, abs=5e-5)
