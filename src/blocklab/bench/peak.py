"""The matrix-multiply peak of this machine, measured in the same run as the blocks.

Square `n x n @ n x n` products (2 n^3 FLOPs each), the best of several timed calls after a
warm-up: the highest rate a well-shaped matmul reaches here, which is the denominator of the
model FLOPs utilisation (MFU). bf16 is a plain bf16 matmul, the op autocast runs.
"""

from __future__ import annotations

import time

import torch

from blocklab.bench.machine import synchronize

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def default_size(device: str) -> int:
    """Typical of the model's matmuls: 2048 on CPU (batch*T = 1024 rows at the issue shape), 8192 on GPU."""
    return 8192 if device == "cuda" else 2048


def matmul_peak(
    precision: str, device: str, n: int | None = None, repeats: int | None = None, min_time: float = 0.25
) -> dict:
    """FLOP/s of the best of `repeats` timed n x n matmuls (each timing spans >= `min_time` seconds)."""
    n = n or default_size(device)
    dtype = DTYPES[precision]
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    flops = 2.0 * n**3
    torch.mm(a, b, out=out)  # warm-up: thread pool, kernel selection
    synchronize(device)
    t0 = time.perf_counter()
    torch.mm(a, b, out=out)
    synchronize(device)
    one = max(time.perf_counter() - t0, 1e-9)
    inner = max(1, int(min_time / one))  # calls per timing, so that short matmuls are not timer-bound
    repeats = repeats or (5 if one < 1.0 else 3)
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b, out=out)
        synchronize(device)
        times.append((time.perf_counter() - t0) / inner)
    best = min(times)
    return {
        "precision": precision,
        "n": n,
        "calls_per_timing": inner,
        "times_s": times,
        "best_s": best,
        "flops_per_s": flops / best,
    }
