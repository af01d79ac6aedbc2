"""Why bf16 + compile cannot reach 2x fp32 eager on this CPU: time every matmul of a Pre-LN
training step, in the model's own shapes (forward, grad-input, grad-weight), in fp32 and bf16.

If the matmuls alone speed up by less than 2x, the whole step cannot: the rest (attention,
norms, softmax, the optimizer) runs in fp32 or is memory-bound either way.
Usage: python benchmarks/bf16_matmul_ceiling.py [--reps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def step_matmuls(N=1024, d=768, ff=3072, V=2048, L=6):
    """(M, K, N) of every matmul in one training step: forward, grad input, grad weight."""
    linears = [(d, d)] * 4 + [(d, ff), (ff, d)]  # q, k, v, proj, fc1, fc2 (in, out)
    shapes = []
    for din, dout in linears * L + [(d, V)]:  # + the tied output head
        shapes += [(N, din, dout), (N, dout, din), (dout, N, din)]
    return shapes


def time_matmuls(shapes, dtype, reps):
    mats = [(torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)) for m, k, n in shapes]
    for a, b in mats:  # warm-up (oneDNN picks kernels per shape)
        a @ b
    totals = []
    for _ in range(reps):
        t = time.perf_counter()
        for a, b in mats:
            a @ b
        totals.append(time.perf_counter() - t)
    return statistics.median(totals)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    shapes = step_matmuls()
    flops = sum(2 * m * k * n for m, k, n in shapes)
    f32 = time_matmuls(shapes, torch.float32, args.reps)
    b16 = time_matmuls(shapes, torch.bfloat16, args.reps)
    print(f"matmuls of one pre-ln training step at the issue shape: {len(shapes)} matmuls, {flops / 1e9:.1f} GFLOP")
    print(
        f"fp32: {f32 * 1e3:.0f} ms ({flops / f32 / 1e9:.0f} GFLOP/s)   bf16: {b16 * 1e3:.0f} ms "
        f"({flops / b16 / 1e9:.0f} GFLOP/s)   bf16 speedup of the matmuls alone: {f32 / b16:.2f}x"
    )


if __name__ == "__main__":
    main()
