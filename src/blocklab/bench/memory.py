"""Peak memory per variant and the memory-scaling benchmark, each measurement in its own process.

See `blocklab.bench.worker` for the method. The scaling benchmark runs a forward + backward
(no optimizer) of each (block, attention path) at growing sequence lengths at batch size
`shape.batch`, and skips, saying why, any configuration predicted to exceed the memory
available: the prediction is the previous measurement grown quadratically in T (an upper
bound for both paths), and once one T is skipped or fails the longer ones are skipped too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict

import torch

from blocklab.bench.config import Shape, Variant
from blocklab.bench.machine import available_memory

SAFETY = 0.7  # use at most this fraction of the memory available when a measurement starts


def run_worker(
    shape: Shape,
    variant: Variant,
    device: str,
    seq_len: int | None = None,
    optimizer: bool = True,
    warmup: int = 1,
    measure: int = 2,
    timeout: float = 1800,
    adamw: str = "fused",
) -> dict:
    """Measure one configuration in a fresh interpreter; errors come back as {"error": ...}."""
    job = {
        "shape": asdict(shape),
        "variant": asdict(variant),
        "device": device,
        "seq_len": seq_len,
        "optimizer": optimizer,
        "adamw": adamw,
        "warmup": warmup,
        "measure": measure,
        "threads": torch.get_num_threads(),
    }
    env = dict(os.environ)
    # glibc: a fixed mmap threshold (no dynamic raise) sends every large tensor to its own mapping, returned to
    # the OS when freed, so resident memory follows the live tensors instead of the heap's fragmentation.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "blocklab.bench.worker", json.dumps(job)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode < 0:
        return {"error": f"killed by signal {-proc.returncode} (out of memory?)", "oom": True}
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def variant_memory(shape: Shape, variant: Variant, device: str, adamw: str = "fused") -> dict:
    """Peak memory of full training steps (one warm-up step, two measured)."""
    return run_worker(shape, variant, device, optimizer=True, warmup=1, measure=2, adamw=adamw)


def memory_scaling(
    shape: Shape,
    blocks: list[str],
    impls: list[str],
    seq_lens: list[int],
    device: str,
    precision: str = "fp32",
    progress: Callable[[str], None] = lambda s: None,
) -> dict:
    """Peak memory of forward + backward per (block, attn_impl) and T; see the module docstring."""
    rows = []
    for block in blocks:
        for impl in impls:
            variant = Variant(block, precision, False, impl)
            last = None  # (T, peak_bytes) of the last successful measurement
            stop = None
            for T in sorted(seq_lens):
                row = {"block": block, "attn_impl": impl, "T": T, "batch": shape.batch, "precision": precision}
                avail = available_memory(device)
                predicted = last[1] * (T / last[0]) ** 2 if last else None
                if stop:
                    row.update(skipped=stop)
                elif predicted is not None and avail is not None and predicted > SAFETY * avail:
                    stop = (
                        f"predicted {predicted / 2**30:.1f} GiB (T^2 growth from T={last[0]}) "
                        f"> {SAFETY:.0%} of {avail / 2**30:.1f} GiB available"
                    )
                    row.update(skipped=stop, predicted_bytes=int(predicted))
                else:
                    progress(f"memory scaling: {block} [{impl}] T={T}")
                    res = run_worker(shape, variant, device, seq_len=T, optimizer=False, warmup=0, measure=1)
                    if "error" in res:
                        stop = f"T={T} failed: {res['error']}"
                        row.update(skipped=stop)
                    else:
                        row.update(peak_bytes=res["peak_bytes"], method=res["method"])
                        last = (T, res["peak_bytes"])
                if "skipped" in row:
                    progress(f"memory scaling: {block} [{impl}] T={T} skipped: {row['skipped']}")
                rows.append(row)
    return {"shape": asdict(shape), "rows": rows, "fits": growth_fits(rows)}


def growth_fits(rows: list[dict]) -> dict:
    """Per (block, impl), from the largest measured T: `loglog_slope`, the exponent of peak memory between the
    two largest T, and `increment_exponent`, the exponent of the T-dependent part alone (the constant, weights
    and optimizer, cancels): with T1 < T2 < T3 geometric, log(dM(T2->T3) / dM(T1->T2)) / log(T3 / T2).
    Linear memory gives 1, the materialised T x T matrices 2."""
    import math

    fits = {}
    for block, impl in dict.fromkeys((r["block"], r["attn_impl"]) for r in rows):
        pts = [
            (r["T"], r["peak_bytes"])
            for r in rows
            if r["block"] == block and r["attn_impl"] == impl and r.get("peak_bytes", 0) > 0
        ]
        if len(pts) < 2:
            continue
        (t1, m1), (t2, m2) = pts[-2], pts[-1]
        fit = {"T": [t1, t2], "loglog_slope": math.log(m2 / m1) / math.log(t2 / t1)}
        if len(pts) >= 3:
            (t0, m0) = pts[-3]
            if t1 * t1 == t0 * t2 and m1 > m0 and m2 > m1:
                fit["increment_exponent"] = math.log((m2 - m1) / (m1 - m0)) / math.log(t2 / t1)
                fit["T"] = [t0, t1, t2]
        fits[f"{block} [{impl}]"] = fit
    return fits
