"""Compile the fused shaped-attention kernels to H100 (sm_90) binaries without a GPU.

Triton's interpreter (the CPU tests) runs the kernels' Python, not their lowering; this builds
each kernel for a real target with triton's bundled ptxas, so a dtype or shape rule of tl.dot
that only the GPU compiler enforces fails here too. Prints one line per variant and exits
non-zero if any variant fails.

    python benchmarks/compile_fused_sm90.py            # all 80 variants (a few minutes)
    python benchmarks/compile_fused_sm90.py --quick    # bf16, d_h=64, causal+padded+centred only
"""
import itertools
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)  # must be unset before the kernels are defined

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import blocklab.attention.fused as fused  # noqa: E402

POINTERS = {"fwd": "Q K V KM GA GB GC OUT ATT CV LSE CNT".split(),
            "kv": "Q K V KM DO LSE DELTA CNT GA GB GC DK DV".split(),
            "q": "Q K V KM DO LSE DELTA GB DQ".split()}
FP32_POINTERS = {"GA", "GB", "GC", "LSE", "CNT", "DELTA"}


def signature(names, pointers, dtype):
    sig = {}
    for n in names:
        if n in pointers:
            sig[n] = "*i32" if n == "KM" else ("*fp32" if n in FP32_POINTERS else f"*{dtype}")
        else:
            sig[n] = {"scale": "fp32", "H": "i32", "T": "i32", "D": "i32"}.get(n, "constexpr")
    return sig


def main(quick: bool) -> int:
    kernels = {"fwd": fused._fwd, "kv": fused._bwd_kv, "q": fused._bwd_q}
    grid = ([("bf16",), (64,), (True,), (True,), (True,)] if quick else
            [("bf16", "fp32"), (64, 128), (True, False), (False, True), (True, False)])
    failed = 0
    for (name, fn), dtype, D, causal, mask, gamma in itertools.product(kernels.items(), *grid):
        if name == "q" and not gamma:
            continue  # the dQ kernel has no centring term
        const = {"CAUSAL": causal, "HAS_MASK": mask, "BM": fused.BLOCK_M, "BN": fused.BLOCK_N,
                 "BD": max(16, triton.next_power_of_2(D))}
        if name != "q":
            const["HAS_GAMMA"] = gamma
        label = f"{name:3s} {dtype} d_h={D} causal={causal:d} mask={mask:d} gamma={gamma:d}"
        t0 = time.time()
        try:
            k = triton.compile(ASTSource(fn, signature(fn.arg_names, POINTERS[name], dtype), const),
                               target=GPUTarget("cuda", 90, 32))
            print(f"{label}: cubin {len(k.asm['cubin'])} B, shared {k.metadata.shared} B, {time.time() - t0:.1f} s")
        except Exception as e:  # report every variant, then fail
            failed += 1
            print(f"{label}: FAILED {type(e).__name__}: {str(e)[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv))
