"""Text tables (stdout, Markdown) and the JSON file of a benchmark result."""

from __future__ import annotations

import json

from blocklab.atomic import write_atomic
from blocklab.bench.machine import describe

MIB = 2**20


def fmt_bytes(b) -> str:
    if b is None:
        return "-"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / MIB:.0f} MiB"


def fmt_int(n: float) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def table(headers: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def step_table(result: dict, markdown: bool = False) -> str:
    headers = [
        "variant",
        "params",
        "FLOP/step",
        "median step",
        "IQR",
        "min-max",
        "tokens/s",
        "MFU",
        "peak mem",
        "vs ref: measured",
        "FLOPs ceiling",
        "of ceiling",
    ]
    rows = []
    for r in result["rows"]:
        t = r["timing"]
        vs = r.get("vs_reference")
        rows.append(
            [
                r["label"],
                fmt_int(r["params"]),
                fmt_int(r["step_flops"]),
                f"{t['median_s'] * 1e3:.1f} ms",
                f"{t['iqr_s'] * 1e3:.1f} ms",
                f"{t['min_s'] * 1e3:.0f}-{t['max_s'] * 1e3:.0f} ms",
                f"{r['tokens_per_s']:.0f}",
                f"{r['mfu']:.1%}",
                fmt_bytes(r["peak_memory_bytes"]) if not r.get("memory_error") else "error",
                f"{vs['speedup']:.3f}x" if vs else "(ref)" if r["block"] == ref_block(result) else "-",
                f"{vs['flops_ceiling']:.3f}x" if vs else "-",
                f"{vs['fraction_of_ceiling']:.0%}" if vs else "-",
            ]
        )
    return table(headers, rows, markdown)


def ref_block(result: dict) -> str:
    return result.get("config", {}).get("reference", "pre-ln")


def speedup_table(result: dict, markdown: bool = False) -> str | None:
    rows = [
        [r["label"], r["vs_fp32_eager"]["baseline"], f"{r['vs_fp32_eager']['speedup']:.2f}x"]
        for r in result["rows"]
        if r.get("vs_fp32_eager")
    ]
    return table(["variant", "baseline", "tokens/s speedup"], rows, markdown) if rows else None


def adamw_table(result: dict, markdown: bool = False) -> str | None:
    """Each Muon variant's step against the same step with AdamW (vs_adamw), timed in the same rounds."""
    rows = [
        [
            r["label"],
            r["vs_adamw"]["baseline"],
            f"{r['vs_adamw']['step_time_ratio']:.3f}x",
            "-".join(f"{x:.3f}" for x in r["vs_adamw"]["ratio_range"]),
            f"{r['vs_adamw']['extra_s'] * 1e3:+.1f} ms",
        ]
        for r in result["rows"]
        if r.get("vs_adamw")
    ]
    headers = ["variant", "AdamW baseline", "step time vs AdamW (median of rounds)", "range", "per step"]
    return table(headers, rows, markdown) if rows else None


def peak_table(result: dict, markdown: bool = False) -> str:
    rows = [
        [
            p,
            str(v["n"]),
            f"{v['flops_per_s'] / 1e9:.1f}",
            f"{v['before_flops_per_s'] / 1e9:.1f} / {v['after_flops_per_s'] / 1e9:.1f}",
        ]
        for p, v in result["peak"].items()
    ]
    return table(["precision", "matmul n", "peak GFLOP/s", "before / after timing"], rows, markdown)


def scaling_table(result: dict, markdown: bool = False) -> str | None:
    ms = result.get("memory_scaling")
    if not ms:
        return None
    keys = list(dict.fromkeys((r["block"], r["attn_impl"]) for r in ms["rows"]))
    Ts = sorted({r["T"] for r in ms["rows"]})
    cell = {(r["block"], r["attn_impl"], r["T"]): r for r in ms["rows"]}
    headers = ["T"] + [f"{b} [{i}]" for b, i in keys]
    rows = []
    for T in Ts:
        line = [str(T)]
        for b, i in keys:
            r = cell.get((b, i, T))
            line.append("-" if r is None else "skipped" if r.get("skipped") else fmt_bytes(r["peak_bytes"]))
        rows.append(line)
    out = table(headers, rows, markdown)
    fits = []
    for k, v in ms["fits"].items():
        text = f"{k}: peak memory grows as T^{v['loglog_slope']:.2f} from T={v['T'][-2]} to {v['T'][-1]}"
        if "increment_exponent" in v:
            text += (
                f"; its T-dependent part as T^{v['increment_exponent']:.2f} over T={'/'.join(map(str, v['T']))}"
                " (1 = linear, 2 = quadratic)"
            )
        fits.append(text)
    grouped: dict[tuple, list[int]] = {}
    for r in ms["rows"]:
        if r.get("skipped"):
            grouped.setdefault((r["block"], r["attn_impl"], r["skipped"]), []).append(r["T"])
    skipped = [f"{b} [{i}] T={','.join(map(str, ts))}: {why}" for (b, i, why), ts in grouped.items()]
    sep = "\n" if not markdown else "\n\n"
    bullet = "- " if markdown else "  "
    parts = [out]
    if fits:
        parts.append("\n".join(bullet + f for f in fits))
    if skipped:
        parts.append("\n".join(bullet + "skipped " + s for s in skipped))
    return sep.join(parts)


def scaling_shape(result: dict) -> str:
    s = result["memory_scaling"]["shape"]
    return (
        f"d={s['d_model']}, heads={s['n_heads']}, ff={s['d_ff']}, layers={s['n_layers']}, "
        f"vocab={s['vocab_size']}, batch={s['batch']}; forward+backward, {result['memory_scaling']['rows'][0]['precision']}"
    )


def render_text(result: dict) -> str:
    cfg = result["config"]
    parts = [f"machine: {describe(result['machine'])}", f"device: {result['machine']['device']}"]
    if result["rows"]:
        parts += [
            f"shape: {cfg['shape']['spec']} ({cfg['reps']} rounds x {cfg['steps']} step(s), "
            f"{cfg['warmup']} warm-up steps, interleaved; AdamW {cfg.get('adamw', 'fused')})",
            "",
            peak_table(result),
            "",
            step_table(result),
        ]
        for extra in (speedup_table(result), adamw_table(result)):
            if extra:
                parts += ["", extra]
        mem = next((r["memory_method"] for r in result["rows"] if r.get("memory_method")), None)
        if mem:
            parts += ["", f"peak memory: {mem}"]
    sc = scaling_table(result)
    if sc:
        parts += ["", f"memory scaling ({scaling_shape(result)}):", sc]
    return "\n".join(parts)


def write_json(result: dict, path: str) -> None:
    """Atomic write (temporary file, then rename)."""
    write_atomic(path, json.dumps(result, indent=1, default=str) + "\n")
