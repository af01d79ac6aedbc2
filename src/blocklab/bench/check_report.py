"""The text `blocklab check` prints: one table of errors and timings, then one verdict per path."""

from __future__ import annotations

import textwrap

from blocklab.bench.check import SHORT


def _err_cells(entry: dict, dtypes: list[str]) -> list[str]:
    """Worst forward and worst gradient error per dtype; "-" where the path did not run."""
    errs = entry.get("max_err", {})
    return [f"{errs[dt][k]:.0e}" if dt in errs else "-" for dt in dtypes for k in ("fwd", "grads")]


def _speed_cell(s: dict) -> str:
    if "ms" not in s:
        return f"skipped ({s['skipped']})" if "skipped" in s else "-"
    return f"{s['ms']:.2f}" + (f" ({s['speedup']:.2f}x)" if "speedup" in s else "")


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    ]


def render_text(result: dict) -> str:
    dtypes, shapes = result["dtypes"], result["shapes"]
    tols = ", ".join(f"{SHORT.get(d, d)} {t:g}" for d, t in result["tolerances"].items())
    cs = result["check_shape"]
    wrap = lambda text: textwrap.wrap(text, 100, subsequent_indent="        ", break_on_hyphens=False)  # noqa: E731
    lines = [f"blocklab check on {result['device']}: {result['machine']}", ""]
    lines += wrap(
        f"errors: max|x - ref| / max(1, max|ref|) against the materialised formula in float64, "
        f"of the output and the gradients of q, k, v and the gains; worst over "
        f"T={','.join(map(str, cs['T']))} (B={cs['B']}, H={cs['H']}, D={cs['D']}), "
        f"{' and '.join(result['cases'])}; tolerance {tols}"
    )
    lines += wrap(
        f"timing: forward+backward ms, causal, median of {result['reps']} after {result['warmup']} "
        "warm-up; (x) = the baseline's time / this time, >1 is faster"
    )
    lines.append("")
    head = ["path", "status"]
    for d in dtypes:
        head += [f"{SHORT.get(d, d)} fwd", f"{SHORT.get(d, d)} grad"]
    head += [f"T={T} ms" for T in shapes]
    rows = [head]
    for name, e in result["paths"].items():
        status = {"correct": "ok", "wrong": "WRONG"}.get(e["status"], e["status"])
        rows.append([name, status, *_err_cells(e, dtypes), *(_speed_cell(e["speed"].get(str(T), {})) for T in shapes)])
    lines += _table(rows)
    shape_desc = ", ".join(f"T={T}: B={t['B']} H={t['H']} D={t['D']} {t['dtype']}" for T, t in result["timing"].items())
    lines += ["", f"timed shapes: {shape_desc}" if shape_desc else "timed shapes: none", "", "verdicts:"]
    lines += [f"  {e['verdict']}" for e in result["paths"].values()]
    lines += [f"  {result['auto']['line']}"]
    wrong = [n for n, e in result["paths"].items() if e["status"] == "wrong"]
    lines += [
        "",
        f"FAILED: wrong on this machine: {', '.join(wrong)}"
        if wrong
        else "all available paths agree with the reference",
    ]
    return "\n".join(lines)
