"""Compile the fused shaped-attention kernels to H100 (sm_90a) binaries without a GPU.

Triton's interpreter (the CPU tests) runs the kernels' Python, not their lowering; this builds
each kernel for a real target with triton's bundled ptxas, so a rule that only the GPU compiler
enforces fails here too. It builds the specialisations the launcher (`attention/fused.py`) runs:
every autotuned tile configuration with its warps and stages, the pointer and argument types it
passes (bf16 q/k with an fp32 V under autocast, the fp32 placeholders for an absent mask), and
Triton's 16-byte alignment hints for 16-aligned pointers and 16-divisible integers (strides, T).
Prints one line per variant (with whether the PTX holds Hopper's wgmma) and exits non-zero if
any variant fails.

    python benchmarks/compile_fused_sm90.py            # every configuration of every variant
    python benchmarks/compile_fused_sm90.py --quick    # the SAS-P language-model case only
"""

import itertools
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)  # must be unset before the kernels are defined
os.environ.pop("BLOCKLAB_FUSED_AUTOTUNE", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from blocklab.attention import fused_kernels as fk  # noqa: E402

# Pointer argument -> which tensor it is: q (query/key dtype), v (value dtype), out (output dtype),
# f32 (gains, statistics), mask (the int32 key mask, or an fp32 placeholder when there is none).
ROLES = {
    "Q": "q",
    "K": "q",
    "V": "v",
    "VQ": "q",
    "DOQ": "q",
    "ATT": "q",
    "DK": "q",
    "DQ": "q",
    "DV": "v",
    "OUT": "out",
    "DO": "out",
    "KM": "mask",
    "CNT": "f32m",
    "GA": "f32",
    "GB": "f32",
    "GC": "f32",
    "LSE": "f32",
    "DELTA": "f32",
    "DBETA": "f32",
    "DALPHA": "f32",
    "DGAMMA": "f32",
    "VSUM": "f32",
    "GPART": "f32",
    "GSUF": "f32",
}
CONSTEXPR = {"D", "BD", "QK_SCALE", "SM_SCALE", "CAUSAL", "HAS_MASK", "HAS_GAMMA", "BM", "BN"}


def signature(fn, types, has_mask):
    sig = {}
    for n in fn.arg_names:
        if n in CONSTEXPR:
            sig[n] = "constexpr"
        elif n in ROLES:
            role = ROLES[n]
            if role in ("mask", "f32m"):
                sig[n] = ("*i32" if role == "mask" else "*fp32") if has_mask else "*fp32"
            else:
                sig[n] = "*" + types.get(role, "fp32")
        else:
            sig[n] = "i32"
    return sig


def integer_values(H, T, D):
    """The runtime integers the launcher passes at this shape: (B, T, H, D) views and (B, T) masks."""
    vals = {"H": H, "T": T, "T_BUCKET": triton.next_power_of_2(T), "NT": triton.cdiv(T, fk.ROW_TILE), "skmb": T}
    for p in ("sq", "sk", "sv", "svq", "sdo", "sdq", "sdk", "sdv"):
        vals.update({p + "b": T * H * D, p + "h": D, p + "t": H * D})
    return vals


def attrs(fn, sig, ints):
    """Triton's launcher marks 16-aligned pointers and 16-divisible integers; build those variants."""
    out = {}
    for i, n in enumerate(fn.arg_names):
        if sig[n].startswith("*") or (sig[n] == "i32" and ints.get(n, 1) % 16 == 0):
            out[(i,)] = [["tt.divisibility", 16]]
    return out


KERNELS = {
    "fwd": (fk.fwd, fk.FWD_TILES),
    "rows": (fk.bwd_rows, [(fk.ROW_TILE, None, 4, 1)]),
    "dkdv": (fk.bwd_dkdv, fk.DKDV_TILES),
    "dq": (fk.bwd_dq, fk.DQ_TILES),
}
DTYPES = {
    "bf16/fp32": {"q": "bf16", "v": "fp32", "out": "fp32"},
    "bf16": {"q": "bf16", "v": "bf16", "out": "bf16"},
    "fp32": {"q": "fp32", "v": "fp32", "out": "fp32"},
}


def main(quick: bool) -> int:
    H, T = 12, 128  # the papers' shape; --quick is the he-codeparrot SAS-P case
    grid = (
        [("bf16/fp32",), (64,), (True,), (False,), (True,)]
        if quick
        else [tuple(DTYPES), (64, 128), (True, False), (False, True), (True, False)]
    )
    failed = built = 0
    for dtype, D, causal, mask, gamma in itertools.product(*grid):
        sm, qk = fk.scales(D)
        flags = {
            "D": D,
            "BD": max(16, triton.next_power_of_2(D)),
            "QK_SCALE": qk,
            "SM_SCALE": sm,
            "CAUSAL": causal,
            "HAS_MASK": mask,
            "HAS_GAMMA": gamma,
        }
        for name, (kernel, tiles) in KERNELS.items():
            fn = kernel.fn if hasattr(kernel, "configs") else kernel  # the JITFunction under the autotuner
            gpu_tiles = tiles if name == "rows" else tiles[1:]  # tiles[0] is the interpreter's
            for bm, bn, warps, stages in gpu_tiles:
                const = {k: v for k, v in {**flags, "BM": bm, "BN": bn}.items() if k in fn.arg_names}
                sig = signature(fn, DTYPES[dtype], mask)
                label = (
                    f"{name:4s} {dtype:9s} d_h={D} causal={causal:d} mask={mask:d} gamma={gamma:d} "
                    f"BM={bm} BN={bn} warps={warps} stages={stages}"
                )
                t0 = time.time()
                try:
                    k = triton.compile(
                        ASTSource(fn, sig, const, attrs(fn, sig, integer_values(H, T, D))),
                        target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": warps, "num_stages": stages},
                    )
                    wgmma = "wgmma" in k.asm.get("ptx", "")
                    print(
                        f"{label}: cubin {len(k.asm['cubin'])} B, shared {k.metadata.shared} B, "
                        f"wgmma {'yes' if wgmma else 'no'}, {time.time() - t0:.1f} s"
                    )
                    built += 1
                except Exception as e:  # report every variant, then fail
                    failed += 1
                    print(f"{label}: FAILED {type(e).__name__}: {str(e)[:300]}")
    print(f"{built} built, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main("--quick" in sys.argv))
