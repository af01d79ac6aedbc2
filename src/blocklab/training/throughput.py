"""Honest throughput for a run: steady-state tokens/s, compilation time and model FLOPs utilisation.

The first steps of every process (compilation, allocator and kernel warm-up) are timed apart
from the rest: `tokens_per_s` in summary.json covers the steady steps only, and the excess of
the first steps over the steady rate is reported as `compile_s` (when compiling) or
`startup_s`. Evaluation and checkpoints were never in the timed region.

MFU = model FLOPs per second / the device's peak for the run's precision. Model FLOPs per
token are the usual 6 x (matmul parameters) for forward and backward, plus the attention
products 12 x layers x T x d (both T x T products, counted in full as FlopCounterMode does).
The peak is the datasheet dense tensor-core rate on known GPUs, and the matmul rate measured
on this machine otherwise (src/blocklab/bench/peak.py), cached per process.
"""

from __future__ import annotations

import functools
import resource
import statistics

import torch
import torch.nn as nn

from blocklab.bench.peak import matmul_peak

WARMUP_STEPS = 3  # per process: the first steps after a start or a resume
# Dense peaks (FLOP/s) from the vendors' datasheets (SXM parts; fp32 without TF32).
GPU_PEAKS = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
}


def flops_per_token(model: nn.Module, seq_len: int, attn_layers: int | None = None) -> float:
    """Training FLOPs per token: 6 x matmul weights (the tied head included) + 12 L T d for attention,
    L = `attn_layers`, the attention products per position (the task says: Task.attention_layers),
    by default the model's `n_layers`."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    head = getattr(model, "head_matrix", None)
    if head is not None and not any(m.weight is head for m in model.modules() if isinstance(m, nn.Linear)):
        linear += head.numel()  # a tied head is the embedding matrix, not an nn.Linear
    cfg = model.cfg
    if attn_layers is None:
        attn_layers = cfg.n_layers
    return 6.0 * linear + 12.0 * attn_layers * seq_len * cfg.d_model


@functools.cache
def device_peak(device_type: str, precision: str, name: str = "") -> float:
    for key, peaks in GPU_PEAKS.items():
        if key in name:
            return peaks[precision]
    # Unknown GPU or the CPU: what a well-shaped matmul reaches here, measured once per process.
    return matmul_peak(precision, device_type, n=1024 if device_type == "cpu" else None, min_time=0.05)["flops_per_s"]


def peak_for(device: torch.device, precision: str) -> float:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return device_peak(device.type, precision, name)


class Throughput:
    """Step times of one process, split into warm-up and steady state; merged with a resumed run's totals."""

    def __init__(self, state: dict, compiled: bool, flops_per_token: float, peak):
        """`peak`: a function giving the device's FLOP/s, called at the first MFU (it may measure)."""
        self.state, self.compiled = state, compiled
        self.flops_per_token, self._peak_fn, self._peak = flops_per_token, peak, None
        state.setdefault("steady_tokens", 0)
        state.setdefault("steady_seconds", 0.0)
        state.setdefault("warmup_seconds", 0.0)
        self.warmup: list[float] = []
        self.steady: list[float] = []

    def step(self, seconds: float, tokens: int) -> None:
        if len(self.warmup) < WARMUP_STEPS:
            self.warmup.append(seconds)
            self.state["warmup_seconds"] += seconds
            return
        self.steady.append(seconds)
        self.state["steady_tokens"] += tokens
        self.state["steady_seconds"] += seconds

    @property
    def peak(self) -> float:
        if self._peak is None:
            self._peak = self._peak_fn()
        return self._peak

    def mfu(self, tokens_per_s: float | None) -> float | None:
        if not tokens_per_s or not self.peak:
            return None
        return tokens_per_s * self.flops_per_token / self.peak

    def summary(self) -> dict:
        s = self.state
        if s["steady_seconds"]:
            tps = s["steady_tokens"] / s["steady_seconds"]
        else:  # a run too short for a steady state: all its steps (steady_steps 0 says so)
            tps = s["tokens"] / s["train_seconds"] if s["train_seconds"] else None
        # The excess of this process's first steps over its steady step time: compilation and warm-up.
        typical = statistics.median(self.steady) if self.steady else (min(self.warmup) if self.warmup else 0.0)
        excess = max(0.0, sum(self.warmup) - typical * len(self.warmup))
        return {
            "tokens_per_s": tps,
            "mfu": self.mfu(tps),
            "flops_per_token": self.flops_per_token,
            "peak_flops_per_s": self.peak,
            "compile_s": excess if self.compiled else None,
            "startup_s": excess,
            "steady_steps": len(self.steady),
        }


def peak_memory_mb(device: torch.device) -> float:
    """This process's peak memory so far, MiB: the CUDA caching allocator's peak of allocated tensors on
    a GPU; on the CPU the peak resident set of the whole process (tensors, and the interpreter and
    libraries: about 0.5 GiB before the first tensor)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
