"""`run_bench`: the whole benchmark of one `BenchConfig`, returned as one JSON-ready dict.

Order: the machine, per-variant peak memory (fresh processes, before the parent holds any
model), FLOPs per (block, attention path), the matmul peak, the interleaved step timing, the
matmul peak again (the best of the two is the peak: a busy machine only lowers it), then the
memory-scaling benchmark. Derived figures: tokens/s = batch * T / median step time; MFU =
step FLOPs / median step time / matmul peak at the variant's precision; ratios against the
reference block (pre-ln) in the same precision and compile mode, beside the FLOPs ceiling.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from blocklab.bench.config import BenchConfig, Variant
from blocklab.bench.flops import step_flops
from blocklab.bench.machine import machine_info, release_freed_memory
from blocklab.bench.memory import memory_scaling, variant_memory
from blocklab.bench.peak import default_size, matmul_peak
from blocklab.bench.step import Trainer
from blocklab.bench.timing import interleaved, summarize


def stderr_progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def peaks_for(precisions: list[str], device: str, n: int | None, progress) -> dict[str, dict]:
    out = {}
    for p in precisions:
        out[p] = matmul_peak(p, device, n)
        progress(f"matmul peak {p}: {out[p]['flops_per_s'] / 1e9:.1f} GFLOP/s (n={out[p]['n']})")
    return out


def run_bench(cfg: BenchConfig, progress: Callable[[str], None] = stderr_progress) -> dict:
    t_start = time.time()
    result = {
        "config": cfg.to_dict(),
        "machine": machine_info(cfg.device),
        "rows": [],
        "peak": {},
        "memory_scaling": None,
    }
    if not cfg.skip_steps:
        result.update(step_benchmark(cfg, progress))
    if cfg.scaling_T:
        blocks = cfg.scaling_blocks or sorted(
            {v.block for v in cfg.variants}, key=[v.block for v in cfg.variants].index
        )
        result["memory_scaling"] = memory_scaling(
            cfg.shape, blocks, cfg.scaling_impls, cfg.scaling_T, cfg.device, cfg.scaling_precision, progress
        )
    result["wall_s"] = time.time() - t_start
    return result


def step_benchmark(cfg: BenchConfig, progress) -> dict:
    shape, device, variants = cfg.shape, cfg.device, cfg.variants
    memory = {}
    if cfg.memory:
        for v in variants:
            progress(f"peak memory: {v.label} (fresh process)")
            memory[v] = variant_memory(shape, v, device, cfg.adamw)
            if "error" in memory[v]:
                progress(f"peak memory: {v.label}: {memory[v]['error']}")

    flops = {}
    for v in variants:
        key = (v.block, v.attn_impl)
        if key not in flops:
            progress(f"counting FLOPs: {v.block} [{v.attn_impl}] (one forward+backward)")
            flops[key] = step_flops(shape, v, device)

    precisions = sorted({v.precision for v in variants}, key=["fp32", "bf16", "fp16"].index)
    n = cfg.peak_size or default_size(device)
    peak_before = peaks_for(precisions, device, n, progress)

    progress(f"building {len(variants)} models at {shape.spec()} on {device}")
    allow_recompiles(sum(v.compile for v in variants))
    trainers = {v.label: Trainer(shape, v, device, adamw=cfg.adamw) for v in variants}
    if cfg.warmup == 0:  # never time a compilation
        for label, t in trainers.items():
            if t.variant.compile:
                progress(f"compiling {label} (one untimed step)")
                t.step()
    times = interleaved({k: t.step for k, t in trainers.items()}, device, cfg.reps, cfg.warmup, cfg.steps, progress)
    for t in trainers.values():
        t.close()
    trainers.clear()
    release_freed_memory()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()  # the memory-scaling workers that follow need the GPU memory back

    peak_after = peaks_for(precisions, device, n, progress)
    peak = {}
    for p in precisions:
        best = max(peak_before[p], peak_after[p], key=lambda r: r["flops_per_s"])
        peak[p] = {
            **best,
            "before_flops_per_s": peak_before[p]["flops_per_s"],
            "after_flops_per_s": peak_after[p]["flops_per_s"],
        }

    rows = [
        make_row(v, shape, flops[(v.block, v.attn_impl)], times[v.label], peak[v.precision], memory.get(v))
        for v in variants
    ]
    add_ratios(rows, cfg.reference)
    return {"rows": rows, "peak": peak}


def allow_recompiles(n_compiled: int) -> None:
    """Every compiled variant is one more compilation of the same forward code: keep dynamo from giving up
    (it falls back to eager, silently, past its recompile limit)."""
    if n_compiled <= 1:
        return
    import torch._dynamo.config as dc

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), 2 * n_compiled + 8))


def make_row(v: Variant, shape, fl: dict, times: list[float], peak: dict, mem: dict | None) -> dict:
    stats = summarize(times)
    med = stats["median_s"]
    row = {
        "label": v.label,
        "block": v.block,
        "precision": v.precision,
        "compile": v.compile,
        "attn_impl": v.attn_impl,
        "mode": v.mode,
        "params": fl["params"],
        "step_flops": fl["flops"],
        "flops_per_token": fl["flops_per_token"],
        "flops_by_op": fl["per_op"],
        "timing": stats,
        "tokens_per_s": shape.tokens / med,
        "achieved_flops_per_s": fl["flops"] / med,
        "tokens_per_s_range": [shape.tokens / stats["max_s"], shape.tokens / stats["min_s"]],
        "mfu": fl["flops"] / med / peak["flops_per_s"],
        "peak_memory_bytes": None,
        "memory_method": None,
    }
    if mem is not None:
        if "error" in mem:
            row["memory_error"] = mem["error"]
        else:
            row["peak_memory_bytes"], row["memory_method"] = mem["peak_bytes"], mem["method"]
    return row


def add_ratios(rows: list[dict], reference: str) -> None:
    """`vs_reference`: speedup over the reference block in the same mode, its FLOPs ceiling and the fraction
    reached; memory ratio. `vs_fp32_eager`: speedup of a bf16 / compiled variant over the same block (and
    optimizer) in fp32 eager. `vs_adamw`: a Muon variant's step time over the same variant's with AdamW, the
    median (and range) of the rounds' ratios, each round timing both, and the difference of the medians."""
    by = {(r["block"], r["mode"], r["attn_impl"]): r for r in rows}
    for r in rows:
        ref = by.get((reference, r["mode"], r["attn_impl"])) or by.get((reference, r["mode"], "sdpa"))
        if ref is not None and ref is not r:
            speedup = r["tokens_per_s"] / ref["tokens_per_s"]
            ceiling = ref["step_flops"] / r["step_flops"]
            r["vs_reference"] = {
                "reference": ref["label"],
                "speedup": speedup,
                "flops_ceiling": ceiling,
                "fraction_of_ceiling": speedup / ceiling,
                "params_ratio": r["params"] / ref["params"],
            }
            if r["peak_memory_bytes"] and ref["peak_memory_bytes"]:
                r["vs_reference"]["memory_ratio"] = r["peak_memory_bytes"] / ref["peak_memory_bytes"]
        muon = " muon" if r["mode"].endswith(" muon") else ""
        base = by.get((r["block"], "fp32 eager" + muon, r["attn_impl"]))
        if base is not None and base is not r:
            r["vs_fp32_eager"] = {"baseline": base["label"], "speedup": r["tokens_per_s"] / base["tokens_per_s"]}
        adamw = by.get((r["block"], r["mode"].removesuffix(" muon"), r["attn_impl"])) if muon else None
        if adamw is not None:
            # The same step with AdamW, timed in the same rounds: paired, the ratio of each round's two times.
            pairs = sorted(a / b for a, b in zip(r["timing"]["times_s"], adamw["timing"]["times_s"]))
            r["vs_adamw"] = {
                "baseline": adamw["label"],
                "step_time_ratio": statistics.median(pairs),
                "ratio_range": [pairs[0], pairs[-1]],
                "extra_s": r["timing"]["median_s"] - adamw["timing"]["median_s"],
            }
