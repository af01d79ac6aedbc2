"""The attention paths `blocklab check` compares, their float64 reference, and their inputs.

Shaped attention (SAS), per head: (alpha_h I + beta_h A_h - gamma_h C) V_h, by three paths named
as `attn_impl` names them; plain softmax attention A V (pre-ln's MHA) by two. The shaped paths are
`modules.shaped_attention`, the function `ShapedAttention` runs; the softmax paths are what
`MultiHeadAttention` calls. Looked up at call time, so a test can break one and see the check
report it.

The competitors of the fused kernel, "the other road": the sdpa path (SDPA + its O(T d) epilogue)
under `torch.compile`, with SDPA pinned to one backend each (`sdpa-compiled:flash`, `:cudnn`,
`:efficient`, `:math`). They are not `attn_impl` values (yet): a model compiled with
`attn_impl="sdpa"` runs the unpinned one. A backend may have no kernel for some inputs (on CUDA,
flash and cuDNN take no fp32 and flash no arbitrary mask; CPU has only flash-CPU and math):
`supports` says which, by running SDPA under that backend on inputs like the case's, so that the
check skips those cases with SDPA's reason instead of calling them wrong.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

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


# SDPA's backends by the names the check shows. PyTorch's CPU SDPA has two: its flash kernel and math.
SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
CPU_BACKENDS = ("flash", "math")
# What compiles the competitors: "inductor" (what training's compile runs); a test may set "aot_eager".
COMPILE_BACKEND = "inductor"
# Dynamo keeps one graph per backend, dtype, mask and (on CUDA) shape here: far more than its default
# limit of 8 per function, past which it would run the function eagerly without a word. Raised for
# the check, and hitting it raises.
RECOMPILE_LIMIT = 256
_compiled: dict[tuple, Callable] = {}


def _pinned(backend: str) -> Callable:
    def shaped_sdpa_pinned(q, k, v, a, b, g, causal, key_mask):
        with sdpa_kernel(SDPA_BACKENDS[backend]):
            return modules.shaped_attention(q, k, v, a, b, g, causal, key_mask, "sdpa")

    return shaped_sdpa_pinned


def compiled_sdpa(backend: str) -> Callable:
    """The sdpa path, SDPA pinned to `backend`, compiled whole (fullgraph: a graph break raises); built at
    its first call and shared by the correctness check and the timing.

    CUDA: static shapes (dynamic=False), one graph per T, as a training run's compile at its fixed T.
    CPU: dynamic shapes, where inductor takes ~10 s per graph (it writes and builds C++): one graph per
    dtype and mask then serves every T and batch >= 2 (dynamo specialises a size of 1), so the graph the
    check verified is the one it times."""

    def shaped_sdpa_compiled(q, k, v, a, b, g, causal, key_mask):
        dynamic = q.device.type == "cpu"
        key = (backend, COMPILE_BACKEND, dynamic)
        if key not in _compiled:
            fn = _pinned(backend)
            _compiled[key] = torch.compile(fn, backend=COMPILE_BACKEND, dynamic=dynamic, fullgraph=True)
        return _compiled[key](q, k, v, a, b, g, causal, key_mask)

    return shaped_sdpa_compiled


def compile_settings():
    """The dynamo settings the compiled competitors run under (see RECOMPILE_LIMIT); a setting this
    PyTorch does not have (older names) is left alone."""
    import torch._dynamo

    wanted = {"recompile_limit": RECOMPILE_LIMIT, "fail_on_recompile_limit_hit": True}
    return torch._dynamo.config.patch(**{k: v for k, v in wanted.items() if hasattr(torch._dynamo.config, k)})


def _compiler_reason(device: torch.device) -> str | None:
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "torch.compile (inductor) on CPU needs a C++ compiler (g++, c++ or clang++): none on PATH"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "torch.compile (inductor) on CUDA needs the triton package"
    return None


def _backend_reason(backend: str) -> Callable[[torch.device], str | None]:
    def unavailable(device: torch.device) -> str | None:
        if device.type == "cpu" and backend not in CPU_BACKENDS:
            return f"no {backend} kernel on CPU: PyTorch's CPU SDPA has the flash-CPU and math backends only"
        if device.type == "cuda" and backend == "flash" and not torch.backends.cuda.is_flash_attention_available():
            return "this PyTorch build has no flash attention kernels"
        return _compiler_reason(device)

    return unavailable


def _no_kernel(backend: str, error: Exception, caught) -> str:
    """Why SDPA found no kernel: its warnings, which on CUDA name the constraint that failed ("Flash
    attention kernel not used because:" and then the reason, as separate warnings), else the error."""
    lines = []
    for w in caught:
        text = (str(w.message).strip().splitlines() or [""])[0].strip()
        if text and not text.endswith(":") and text not in lines:
            lines.append(text)
    return f"no {backend} kernel: " + ("; ".join(lines[:2]) or (str(error).strip().splitlines() or [""])[0])


def _backend_supports(backend: str) -> Callable:
    def supports(device, dtype, T, D, causal, key_mask) -> str | None:
        """None when SDPA under `backend` runs forward and backward on such inputs, else why not. Two heads
        of one sequence (of each, when masked), split from a (B, T, 2 D) tensor as the paths' inputs are
        (strides included): what a backend accepts does not depend on B or H."""
        B = 1 if key_mask is None else key_mask.shape[0]
        x = torch.zeros(B, T, 2 * D, device=device, dtype=dtype, requires_grad=True)
        q = split_heads(x, 2)
        amp = torch.autocast(device.type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
        with warnings.catch_warnings(record=True) as caught, sdpa_kernel(SDPA_BACKENDS[backend]), amp:
            warnings.simplefilter("always")
            try:
                functional.softmax_attention(q, q, q, causal, key_mask, "sdpa").sum().backward()
            except RuntimeError as e:
                return _no_kernel(backend, e, caught)
        return None

    return supports


@dataclass(frozen=True)
class Path:
    name: str
    kind: str  # "shaped" (q, k, v and three gains) or "softmax" (q, k, v)
    fn: Callable
    baseline: str  # the path its speed is compared with
    tt_matrix: bool  # forms B x H x T x T tensors: timed only where they fit
    unavailable: Callable[[torch.device], str | None] = _always
    # (device, dtype, T, D, causal, key_mask) -> None, or why this path has no kernel for such inputs
    supports: Callable | None = None
    compiled: bool = False  # compiled by the check (seconds per input signature)
    impl: str | None = None  # the attn_impl that runs it; None: not one (yet)
    backend: str | None = None  # the SDPA backend it is pinned to


def _competitor(backend: str) -> Path:
    name = f"sdpa-compiled:{backend}"
    return Path(
        name,
        "shaped",
        compiled_sdpa(backend),
        "sdpa",
        backend == "math",
        _backend_reason(backend),
        _backend_supports(backend),
        compiled=True,
        backend=backend,
    )


# The physical yardstick: plain causal SDPA on q, k, v of the same shape, no shaping.
YARDSTICK = "mha-sdpa"
# Tests break a path by replacing its entry or a library function it calls (looked up per call).
PATHS = {
    "sdpa": Path("sdpa", "shaped", shaped_sdpa, "sdpa", False, impl="sdpa"),
    "fused": Path("fused", "shaped", shaped_fused, "sdpa", False, _fused_reason, impl="fused"),
    "materialized": Path("materialized", "shaped", shaped_materialized, "sdpa", True, impl="materialized"),
    **{f"sdpa-compiled:{b}": _competitor(b) for b in SDPA_BACKENDS},
    "mha-sdpa": Path("mha-sdpa", "softmax", softmax_sdpa, "mha-sdpa", False, impl="sdpa"),
    "mha-materialized": Path(
        "mha-materialized", "softmax", softmax_materialized, "mha-sdpa", True, impl="materialized"
    ),
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
