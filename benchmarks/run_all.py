"""The performance benchmark in one go (`make bench`): regenerates benchmarks/RESULTS.md and benchmarks/results.json.

Runs, through the `blocklab bench` command line (in-process):
  1. the CPU target shape (d=768, 12 heads, MLP 3072, T=128, 6 layers, vocab 2048, batch 8): pre-ln, sas,
     sas-p, sas-p-nonorm, parallel in fp32 eager, with pre-ln and sas-p in bf16 autocast + torch.compile
     timed in the same round-robin;
  2. peak memory of forward+backward against T = 512..8192 for sas-p and pre-ln, fused (sdpa) and
     materialised attention, at a smaller width so that the materialised path fits in memory;
  3. on a machine with CUDA, the he-codeparrot shape (18 layers, batch 128, vocab 50000) in bf16 + compile.
About 10-15 minutes on 2 CPU cores. `--quick` runs tiny shapes (a smoke test of this script, minutes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from blocklab.bench import render_text, run_bench  # noqa: E402
from blocklab.bench.machine import describe  # noqa: E402
from blocklab.bench.report import fmt_bytes, peak_table, scaling_shape, scaling_table, speedup_table, step_table  # noqa: E402
from blocklab.cli import bench as bench_cli  # noqa: E402

CPU_BLOCKS = "pre-ln,sas,sas-p,sas-p-nonorm,parallel"
SCALING_SHAPE = "d=256,heads=4,ff=1024,layers=2,vocab=2048,batch=1"
SCALING_T = "512,1024,2048,4096,8192"


def commands(quick: bool, reps: int, cuda: bool) -> dict[str, list[str]]:
    shape = "tiny" if quick else "cpu-target"
    runs = {
        "cpu": [
            "--blocks",
            CPU_BLOCKS,
            "--shape",
            shape,
            "--extra",
            "pre-ln:bf16:compile,sas-p:bf16:compile",
            "--reps",
            str(reps),
            "--warmup",
            "2",
            "--device",
            "cpu",
        ],
        "memory_scaling": [
            "--blocks",
            "sas-p,pre-ln",
            "--shape",
            "tiny,batch=1" if quick else SCALING_SHAPE,
            "--memory-scaling",
            "32,64,128" if quick else SCALING_T,
            "--scaling-only",
            "--device",
            "cpu",
        ],
    }
    if cuda:
        runs["gpu"] = [
            "--blocks",
            "pre-ln,sas-p",
            "--shape",
            "tiny" if quick else "he-codeparrot",
            "--precision",
            "bf16",
            "--compile",
            "--reps",
            str(max(reps, 10)),
            "--warmup",
            "3",
            "--device",
            "cuda",
        ]
    if quick:
        runs["cpu"] += ["--peak-size", "256"]
    return runs


def run_command(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="blocklab")
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *argv])
    return run_bench(bench_cli.config_from_args(args, argv))


def row(result: dict, block: str, mode: str = "fp32 eager") -> dict | None:
    return next((r for r in result["rows"] if r["block"] == block and r["mode"] == mode), None)


def check(name: str, ok: bool | None, detail: str) -> dict:
    return {"target": name, "met": ok, "detail": detail}


def targets(runs: dict) -> list[dict]:
    """The performance targets, each met / not met / not measured, with the numbers."""
    out = []
    cpu = runs.get("cpu")
    if cpu:
        for block, need in (("sas-p", None), ("sas", 1.05)):
            r = row(cpu, block)
            if r and r.get("vs_reference"):
                vs = r["vs_reference"]
                if need is None:
                    out.append(
                        check(
                            "SAS-P tokens/s >= 0.95 x FLOPs ceiling over Pre-LN (fp32 eager)",
                            vs["fraction_of_ceiling"] >= 0.95,
                            f"{vs['speedup']:.3f}x measured vs {vs['flops_ceiling']:.3f}x ceiling = "
                            f"{vs['fraction_of_ceiling']:.1%} of ceiling (need >= 95%, i.e. >= "
                            f"{0.95 * vs['flops_ceiling']:.3f}x)",
                        )
                    )
                else:
                    out.append(
                        check(
                            "SAS tokens/s >= 1.05x Pre-LN (fp32 eager)",
                            vs["speedup"] >= need,
                            f"{vs['speedup']:.3f}x measured (ceiling {vs['flops_ceiling']:.3f}x)",
                        )
                    )
        r = row(cpu, "pre-ln")
        if r:
            out.append(
                check(
                    "Pre-LN MFU >= 60% of the measured fp32 matmul peak",
                    r["mfu"] >= 0.60,
                    f"MFU {r['mfu']:.1%}: {r['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s achieved vs "
                    f"{cpu['peak']['fp32']['flops_per_s'] / 1e9:.1f} GFLOP/s peak",
                )
            )
        for block in ("pre-ln", "sas-p"):
            r = row(cpu, block, "bf16 compile")
            if r and r.get("vs_fp32_eager"):
                s = r["vs_fp32_eager"]["speedup"]
                out.append(
                    check(
                        f"{block}: bf16 autocast + torch.compile >= 2x fp32 eager tokens/s",
                        s >= 2.0,
                        f"{s:.2f}x ({r['tokens_per_s']:.0f} vs {row(cpu, block)['tokens_per_s']:.0f} tokens/s)",
                    )
                )
    ms = (runs.get("memory_scaling") or {}).get("memory_scaling")
    if ms:
        cell = {(r["block"], r["attn_impl"], r["T"]): r for r in ms["rows"]}
        sdpa, pre, mat = (
            cell.get(k) for k in (("sas-p", "sdpa", 4096), ("pre-ln", "sdpa", 4096), ("sas-p", "materialized", 4096))
        )
        if sdpa and pre and sdpa.get("peak_bytes") and pre.get("peak_bytes"):
            ratio = sdpa["peak_bytes"] / pre["peak_bytes"]
            mat_text = (
                f"materialized {fmt_bytes(mat['peak_bytes'])} ({mat['peak_bytes'] / sdpa['peak_bytes']:.1f}x sdpa)"
                if mat and mat.get("peak_bytes")
                else f"materialized: {mat.get('skipped') if mat else 'not run'}"
            )
            far_less = bool(mat and (mat.get("skipped") or mat["peak_bytes"] >= 2 * sdpa["peak_bytes"]))
            out.append(
                check(
                    "T=4096: sas-p sdpa peak memory <= 1.25x Pre-LN and far less than materialized",
                    ratio <= 1.25 and far_less,
                    f"sas-p sdpa {fmt_bytes(sdpa['peak_bytes'])} = {ratio:.2f}x pre-ln "
                    f"({fmt_bytes(pre['peak_bytes'])}); {mat_text}",
                )
            )
    gpu = runs.get("gpu")
    if gpu:
        parts = [f"{r['label']}: {r['tokens_per_s']:.0f} tokens/s, MFU {r['mfu']:.1%}" for r in gpu["rows"]]
        out.append(
            check(
                "GPU: he-codeparrot shape, bf16 + compile, pre-ln and sas-p",
                True,
                f"{gpu['machine'].get('gpu')}: " + "; ".join(parts),
            )
        )
    else:
        out.append(
            check(
                "GPU: he-codeparrot shape, bf16 + compile, pre-ln and sas-p",
                None,
                "not measured by this run: no CUDA device on this machine (see the GPU section below)",
            )
        )
    return out


def markdown(runs: dict, cmds: dict, checks: list[dict], started: str, wall: float, quick: bool) -> str:
    any_run = next(iter(runs.values()))
    m = any_run["machine"]
    lines = [
        "# blocklab benchmark results",
        "",
        f"Generated {started} by `python benchmarks/run_all.py{' --quick' if quick else ''}` (`make bench`) "
        f"in {wall / 60:.1f} minutes. Regenerate with the same command; every number above the GPU section comes from that one run.",
        "",
        "## Machine",
        "",
        f"- {describe(m)}",
        f"- {m['cpu_count']} logical CPUs, {fmt_bytes(m['memory_total_bytes'])} RAM, Python {m['python']}, {m['platform']}",
        f"- load average at the start of the first benchmark: "
        f"{', '.join(f'{x:.2f}' for x in m['load_average']) if m.get('load_average') else 'n/a'}"
        " (the machine should be otherwise idle: other processes slow some variants more than others)",
        "",
        "## Commands",
        "",
        "```",
    ]
    lines += [f"blocklab bench {shlex.join(argv)}" for argv in cmds.values()]
    lines += ["```", "", "## Targets (issue 7)", "", "| target | met | measured |", "|---|---|---|"]
    for c in checks:
        met = {True: "yes", False: "**no**", None: "not measured"}[c["met"]]
        lines.append(f"| {c['target']} | {met} | {c['detail']} |")
    for name, title in (("cpu", "CPU: the target shape"), ("gpu", "GPU: the he-codeparrot shape")):
        res = runs.get(name)
        if not res:
            continue
        cfg = res["config"]
        lines += [
            "",
            f"## {title}",
            "",
            f"Shape `{cfg['shape']['spec']}`; {cfg['reps']} interleaved rounds x {cfg['steps']} step, "
            f"{cfg['warmup']} warm-up steps per variant; AdamW ({cfg['adamw']}); device {res['machine']['device']}.",
            "",
            "Matrix-multiply peak (square n x n matmuls, best of several, measured before and after the timing):",
            "",
            peak_table(res, markdown=True),
            "",
            step_table(res, markdown=True),
        ]
        sp = speedup_table(res, markdown=True)
        if sp:
            lines += ["", "Speedup over the same block in fp32 eager (same round-robin):", "", sp]
        mem = next((r["memory_method"] for r in res["rows"] if r.get("memory_method")), None)
        if mem:
            lines += ["", f"Peak memory: {mem}."]
    res = runs.get("memory_scaling")
    if res and res.get("memory_scaling"):
        lines += [
            "",
            "## Memory against sequence length",
            "",
            f"Peak memory of one forward+backward ({scaling_shape(res)}), each configuration in a fresh "
            "process. `sdpa` is the fused shaped attention (running mean for C, one "
            "scaled_dot_product_attention call): O(T d). `materialized` forms the T x T matrices: O(T^2).",
            "",
            scaling_table(res, markdown=True),
        ]
    lines += [
        "",
        "## Method",
        "",
        "- Step: forward, backward, AdamW step (param_groups: no decay on gains/norms), zero_grad, on one fixed "
        "random batch. Variants are timed round-robin (order rotating each round) after warm-up; median and "
        "spread (IQR, min-max) of the per-step times.",
        "- FLOPs: torch.utils.flop_counter.FlopCounterMode on one forward+backward per block (matmuls and "
        "attention; CPU flash attention counted with PyTorch's SDPA formulas; full T x T even when causal). "
        "The FLOPs ceiling of a block over Pre-LN is FLOPs(pre-ln) / FLOPs(block).",
        "- MFU: step FLOPs / median step time / matmul peak at the variant's precision (bf16 rows against "
        "the bf16 peak).",
        "- Peak memory (CPU): each configuration alone in a fresh process; high-water RSS (VmHWM) during the "
        "measured steps minus RSS after a tiny warm-up model, the high-water mark reset after one warm-up step; "
        "glibc's mmap threshold is fixed (MALLOC_MMAP_THRESHOLD_=131072) so that freed tensors leave the "
        "resident set instead of lingering in a fragmented heap. "
        "Compiled variants also hold what torch.compile keeps (compiled code, guards: about 100 MiB at the tiny shape). "
        "On CUDA: torch.cuda.max_memory_allocated.",
        "- AdamW is `fused=True` (one multi-tensor kernel): PyTorch's default on CPU is a per-tensor loop that "
        "is several times slower (see `blocklab bench --adamw loop`).",
        "",
    ]
    return "\n".join(lines)


KEEP_MARKER = "<!-- measured by other commands (GPU, memory): run_all.py keeps everything below -->"


def kept_sections(path: str) -> str:
    """The hand-run sections below KEEP_MARKER (GPU tables, other scripts): this run cannot remeasure them."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    i = text.find(KEEP_MARKER)
    return "\n\n" + text[i:] if i >= 0 else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny shapes: a smoke test of this script")
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default: 15, --quick: 2)")
    p.add_argument("--out", default=HERE, help="folder of RESULTS.md and results.json (default: benchmarks/)")
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU run even when CUDA is available")
    args = p.parse_args(argv)
    import torch

    reps = args.reps or (2 if args.quick else 15)
    cmds = commands(args.quick, reps, torch.cuda.is_available() and not args.no_gpu)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.time()
    runs = {}
    for i, (name, cmd) in enumerate(cmds.items(), 1):
        print(f"[run_all] {i}/{len(cmds)} {name}: blocklab bench {shlex.join(cmd)}", file=sys.stderr, flush=True)
        runs[name] = run_command(cmd)
        print(render_text(runs[name]), flush=True)
        print(f"[run_all] {name} done in {runs[name]['wall_s'] / 60:.1f} min", file=sys.stderr, flush=True)
    wall = time.time() - t0
    checks = targets(runs)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(
            {
                "generated": started,
                "wall_s": wall,
                "quick": args.quick,
                "commands": {k: "blocklab bench " + shlex.join(v) for k, v in cmds.items()},
                "targets": checks,
                "runs": runs,
            },
            f,
            indent=1,
            default=str,
        )
        f.write("\n")
    path = os.path.join(args.out, "RESULTS.md")
    kept = kept_sections(path)
    with open(path, "w") as f:
        f.write(markdown(runs, cmds, checks, started, wall, args.quick) + kept)
    for c in checks:
        print(
            f"[run_all] target {'MET' if c['met'] else 'NOT MET' if c['met'] is False else 'n/a'}: "
            f"{c['target']}: {c['detail']}",
            file=sys.stderr,
        )
    print(f"[run_all] wrote {args.out}/RESULTS.md and results.json ({wall / 60:.1f} min)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
