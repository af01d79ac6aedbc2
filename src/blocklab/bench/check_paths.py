"""The attention paths `blocklab check` compares, their float64 reference, and their inputs.

Shaped attention (SAS), per head: (alpha_h I + beta_h A_h - gamma_h C) V_h, by three paths named
as `attn_impl` names them; plain softmax attention A V (pre-ln's MHA) by two. The shaped paths are
`modules.shaped_attention`, the function `ShapedAttention` runs; the softmax paths are what
`MultiHeadAttention` calls. Looked up at call time, so a test can break one and see the check
report it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from blocklab.attention import functional, fused, modules
from blocklab.attention.functional import split_heads


def shaped_materialized(q, k, v, a, b, g, causal, key_mask):
    """The T x T formula, as `ShapedAttention` forms it; in float64 it is the reference."""
    return modules.shaped_attention(q, k, v, a, b, g, causal, key_mask, "materialized")


def shaped_sdpa(q, k, v, a, b, g, causal, key_mask):
    return modules.shaped_attention(q, k, v, a, b, g, causal, key_mask, "sdpa")


def shaped_fused(q, k, v, a, b, g, causal, key_mask):
    return modules.shaped_attention(q, k, v, a, b, g, causal, key_mask, "fused")


def softmax_materialized(q, k, v, causal, key_mask):
    return functional.softmax_attention(q, k, v, causal, key_mask, "materialized")


def softmax_sdpa(q, k, v, causal, key_mask):
    return functional.softmax_attention(q, k, v, causal, key_mask, "sdpa")


def _always(device: torch.device) -> str | None:
    return None


def _fused_reason(device: torch.device) -> str | None:
    return fused.unavailable_reason(device)


@dataclass(frozen=True)
class Path:
    name: str
    kind: str  # "shaped" (q, k, v and three gains) or "softmax" (q, k, v)
    fn: Callable
    baseline: str  # the path its speed is compared with
    tt_matrix: bool  # forms B x H x T x T tensors: timed only where they fit
    unavailable: Callable[[torch.device], str | None] = _always


# Tests break a path by replacing its entry or a library function it calls (looked up per call).
PATHS = {
    "sdpa": Path("sdpa", "shaped", shaped_sdpa, "sdpa", False),
    "fused": Path("fused", "shaped", shaped_fused, "sdpa", False, _fused_reason),
    "materialized": Path("materialized", "shaped", shaped_materialized, "sdpa", True),
    "mha-sdpa": Path("mha-sdpa", "softmax", softmax_sdpa, "mha-sdpa", False),
    "mha-materialized": Path("mha-materialized", "softmax", softmax_materialized, "mha-sdpa", True),
}


@dataclass
class Inputs:
    """q, k, v as (B, H, T, D) head views of (B, T, H*D) leaves, as a model's projections give them."""

    leaves: list[torch.Tensor]  # the (B, T, H*D) q, k, v, then alpha, beta, gamma (H,)
    key_mask: torch.Tensor | None
    H: int

    def grad_leaves(self, kind: str) -> list[torch.Tensor]:
        return self.leaves if kind == "shaped" else self.leaves[:3]

    def args(self, kind: str) -> list:
        qkv = [split_heads(t, self.H) for t in self.leaves[:3]]
        return qkv + self.leaves[3:] if kind == "shaped" else qkv

    def float64(self) -> Inputs:
        """The same values in float64, fresh leaves: what the reference runs on."""
        return Inputs([t.detach().double().requires_grad_() for t in self.leaves], self.key_mask, self.H)


def reference(kind: str, inputs: Inputs, causal: bool):
    """The materialised formula in float64 on the same input values: (output, its grad leaves)."""
    x = inputs.float64()
    args = x.args(kind)
    if kind == "shaped":
        out = shaped_materialized(*args, causal, x.key_mask)
    else:
        out = functional.attention_matrix(*args[:2], causal, x.key_mask) @ args[2]
    return out, x.grad_leaves(kind)


def make_inputs(B, H, T, D, dtype, device, padded: bool, seed: int = 0) -> Inputs:
    """Random q, k, v in `dtype` and random gains in float32 (a model's gains stay fp32 under autocast).

    Gains are rand + 0.5, not the init values 1: at alpha = beta = gamma = 1 a swapped or dropped
    gain would go unseen. Padding is on the right, of a different length per sequence.
    """
    g = torch.Generator().manual_seed(seed)
    qkv = [torch.randn(B, T, H * D, generator=g).to(device, dtype).requires_grad_() for _ in range(3)]
    gains = [(torch.rand(H, generator=g) + 0.5).to(device).requires_grad_() for _ in range(3)]
    mask = None
    if padded:
        mask = torch.ones(B, T, dtype=torch.bool, device=device)
        for i in range(B):
            mask[i, max(1, T - (i + 1) * max(1, T // (2 * B))) :] = False
    return Inputs(qkv + gains, mask, H)
