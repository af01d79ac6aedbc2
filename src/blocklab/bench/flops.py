"""Training-step FLOPs, counted with `torch.utils.flop_counter.FlopCounterMode`.

One full forward + backward of the eager float32 model (the optimizer's elementwise update
is not a matmul and is not counted, as in the usual MFU convention). FLOPs do not depend on
the precision or on compilation, so each (block, attention path) is counted once.

FlopCounterMode has no formula for the CPU flash-attention kernels that
`scaled_dot_product_attention` dispatches to on CPU; we register PyTorch's own SDPA formulas
for them, so attention costs the same on CPU and GPU. Like FlopCounterMode, we count the full
T x T attention products even when causal (the kernel skips about half of them).

Nor has it one for the fused shaped-attention op (`attn_impl="fused"`, `blocklab::shaped_attention`
and its backward): an op without a formula counts zero, so the fused path's step lost all of its
attention products (at the he-codeparrot shape 2.5% of SAS-P's step, which made its "FLOPs ceiling"
over Pre-LN 1.157x instead of the sdpa path's 1.127x). It computes the same products as SDPA plus
an O(T d) epilogue, so it is given SDPA's formulas: forward Q K^T and A V, backward the five
products of a flash backward (Q K^T recomputed, dV, dP, dQ, dK). The epilogue (alpha V, the running
mean C V, the gains: a few elementwise passes and a cumulative sum, ~20 d per token and layer with
the backward) is not counted, on either path: FlopCounterMode counts matrix products only, not the
sdpa path's addcmul and cumsum, nor norms, softmax or residual adds.
"""

from __future__ import annotations

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from blocklab.attention.modules import fused_unavailable
from blocklab.bench.config import Shape, Variant
from blocklab.bench.step import Trainer

aten = torch.ops.aten


def _sdpa_forward(q, k, v, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(q, k, v)


def _sdpa_backward(grad_out, q, k, v, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, q, k, v)


def _fused_forward(q, k, v, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(q, k, v)


def _fused_backward(dout, q, k, v, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(dout, q, k, v)


def _custom_mapping() -> dict:
    """Formulas for the CPU flash-attention ops (absent from PyTorch's registry in the versions we know)
    and for the fused shaped-attention op, where it is registered (blocklab.attention.fused imported)."""
    mapping = {}
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _sdpa_forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _sdpa_backward),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_counter.flop_registry:
            mapping[op] = formula
    for name, formula in (("shaped_attention", _fused_forward), ("shaped_attention_backward", _fused_backward)):
        try:
            mapping[getattr(torch.ops.blocklab, name)] = formula
        except AttributeError:  # not registered: no triton, or the fused module not imported
            pass
    return mapping


def count_flops(fn) -> tuple[int, dict[str, int]]:
    """Total FLOPs of `fn()` and the FLOPs per aten op."""
    with FlopCounterMode(display=False, custom_mapping=_custom_mapping()) as counter:
        fn()
    per_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), per_op


def step_flops(shape: Shape, variant: Variant, device: str) -> dict:
    """FLOPs of one training step (forward + backward) of `variant.block` at `shape`."""
    eager = Variant(variant.block, "fp32", False, variant.attn_impl)
    if variant.attn_impl == "fused":
        fused_unavailable(torch.device(device))  # imports the fused op, so that _custom_mapping finds it
    trainer = Trainer(shape, eager, device, optimizer=False)
    total, per_op = count_flops(trainer.forward_backward)
    params = trainer.params
    trainer.close()
    return {"flops": total, "per_op": per_op, "params": params, "flops_per_token": total / shape.tokens}
