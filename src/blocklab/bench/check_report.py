"""What `blocklab check` concludes and prints: one verdict per path, the fastest correct path per range of T
(`recommend`), and the text: a table of errors and timings, the distance from plain SDPA, the verdicts."""

from __future__ import annotations

import math
import textwrap

import torch

SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _badness(rec: dict) -> float:
    err = rec["errors"][rec["worst"]]
    return err / rec["tol"] if math.isfinite(err) else math.inf


def failure_text(res: dict) -> str:
    """The worst failing case of a path (error over tolerance), in one line."""
    bad = max((r for r in res["records"] if not r["ok"]), key=_badness, default=None)
    if bad is None:
        return res["raised"]
    err = bad["errors"][bad["worst"]]
    return f"{bad['worst']} rel err {err:.2g} > {bad['tol']:g} ({bad['dtype']}, T={bad['T']}, {bad['case']})"


def unsupported_note(records: list[dict]) -> str | None:
    """The cases a path has no kernel for, grouped by reason: "float32 causal, padded: <reason>"."""
    by_reason: dict[str, list[str]] = {}
    for r in records:
        if "skipped" in r:
            cases = by_reason.setdefault(r["skipped"], [])
            if f"{r['dtype']} {r['case']}" not in cases:
                cases.append(f"{r['dtype']} {r['case']}")
    return "; ".join(f"{', '.join(c)}: {why}" for why, c in by_reason.items()) or None


def path_verdict(name: str, entry: dict, shapes, baseline: str) -> str:
    if entry["status"] == "unavailable":
        return f"{name}: unavailable: {entry['reason']}"
    if entry["status"] == "wrong":
        return f"{name}: WRONG: {entry['reason']}"
    speeds, yard = [], []
    for T in shapes:
        s = entry["speed"].get(str(T), {})
        speeds.append(
            f"T={T} "
            + (f"{s['speedup']:.2f}x" if "speedup" in s else f"skipped ({s.get('skipped', 'baseline not timed')})")
        )
        if "vs_yardstick" in s:
            yard.append(f"T={T} {s['vs_yardstick']:.2f}")
    errs = "; ".join(
        f"{SHORT.get(dt, dt)} fwd {e['fwd']:.0e} grads {e['grads']:.0e}" for dt, e in entry["max_err"].items()
    )
    speed = "speed is the baseline" if name == baseline else f"speed vs {baseline}: " + ", ".join(speeds)
    if yard:
        speed += f"; time / plain causal SDPA's: {', '.join(yard)}"
    gaps = f"; no kernel for {entry['unsupported']}" if entry.get("unsupported") else ""
    return f"{name}: correct (max rel err {errs}), {entry.get('note', speed)}{gaps}"


def auto_line(device: str, paths: dict, shapes) -> tuple[str, bool]:
    """Which path attn_impl="auto" runs here, and a warning when it is wrong, missing, or slower than
    another path attn_impl can name (the compiled competitors are not such paths yet: `recommend`)."""
    from blocklab.attention.modules import resolve_impl

    # The timed shapes are bf16, the precision "auto" is measured for; fp32 keeps sdpa (resolve_impl).
    auto = resolve_impl("auto", torch.device(device), torch.bfloat16)
    head = f'attn_impl="auto" on {device} (bf16) runs {auto}'
    entry = paths.get(auto)
    if entry is None:
        return f"{head} (not checked)", False
    if entry["status"] != "correct":
        return f"{head}: WARNING: that path is {entry['status'].upper()} here", True
    faster = []
    for other, e in paths.items():
        if other == auto or e["kind"] != "shaped" or e["status"] != "correct" or e.get("compiled"):
            continue
        for T in shapes:
            mine, theirs = entry["speed"].get(str(T), {}), e["speed"].get(str(T), {})
            if "ms" in mine and "ms" in theirs and theirs["ms"] < mine["ms"] / 1.1:
                faster.append(f"{other} at T={T} ({mine['ms'] / theirs['ms']:.2f}x)")
    if faster:
        return f"{head}: WARNING: slower than " + ", ".join(faster), True
    return f"{head}: correct, and no other attn_impl path is more than 10% faster at any timed shape", False


# A win by less than this factor over the runner-up is called a tie: the check's medians move by a few
# percent from run to run (more on a shared machine), so such a win decides nothing.
TIE = 1.05


def _margin(n: dict | None) -> str:
    if n is None:
        return "alone"
    return f"{n['speedup']:.2f}x {n['path']}" + (f": within {TIE - 1:.0%}, a tie" if n["speedup"] < TIE else "")


def recommend(paths: dict, shapes) -> dict:
    """The fastest correct shaped path at each timed T, and the ranges of T each one wins.

    Candidates: shaped paths whose status is "correct" (a path wrong anywhere, or unavailable, is never
    picked) with a time at that T. `per_shape[T]` names the path with its `impl` and `backend` (what a
    future `auto` would select), its time and how much faster it is than the runner-up (`tie` when by
    less than TIE)."""
    per_shape, ranges = {}, []
    for T in shapes:
        timed = sorted(
            (e["speed"][str(T)]["ms"], name)
            for name, e in paths.items()
            if e["kind"] == "shaped" and e["status"] == "correct" and "ms" in e["speed"].get(str(T), {})
        )
        if not timed:
            continue
        (ms, name), runner_up = timed[0], (timed[1] if len(timed) > 1 else None)
        per_shape[str(T)] = {
            "path": name,
            "impl": paths[name].get("impl"),
            "backend": paths[name].get("backend"),
            "ms": ms,
            "next": runner_up and {"path": runner_up[1], "ms": runner_up[0], "speedup": runner_up[0] / ms},
            "tie": runner_up is not None and runner_up[0] / ms < TIE,
        }
        if ranges and ranges[-1]["path"] == name and ranges[-1]["T"][-1] == shapes[shapes.index(T) - 1]:
            ranges[-1]["T"].append(T)
        else:
            ranges.append({"path": name, "T": [T]})
    parts = []
    for r in ranges:
        Ts = r["T"]
        span = f"T={Ts[0]}" if len(Ts) == 1 else f"T={Ts[0]}-{Ts[-1]}"
        margins = ", ".join(_margin(per_shape[str(T)]["next"]) for T in Ts)
        parts.append(f"{span}: {r['path']} ({margins})")
    line = "fastest correct shaped path: " + ("; ".join(parts) if parts else "none timed")
    return {"per_shape": per_shape, "ranges": ranges, "line": line}


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


def _status_cells(result: dict) -> tuple[dict[str, str], list[str]]:
    """Each path's status cell, with a footnote number where the reason is too long for the table: why a
    path is unavailable, or which cases a backend has no kernel for."""
    cells, notes = {}, []
    for name, e in result["paths"].items():
        cell = {"correct": "ok", "wrong": "WRONG"}.get(e["status"], e["status"])
        why = e.get("reason") if e["status"] == "unavailable" else e.get("unsupported")
        if why and e["status"] != "wrong":
            notes.append(f"[{len(notes) + 1}] {name}: {'' if e['status'] == 'unavailable' else 'no kernel for '}{why}")
            cell += f" [{len(notes)}]"
        cells[name] = cell
    return cells, notes


def _yardstick_lines(result: dict) -> list[str]:
    """Each shaped path's time over plain causal SDPA's at the same shape: how far from attention alone."""
    shapes, paths = result["shapes"], result["paths"]
    rows = [["path", *(f"T={T}" for T in shapes)]]
    for name, e in paths.items():
        if e["kind"] != "shaped" or e["status"] == "unavailable":
            continue
        cells = []
        for T in shapes:
            s = e["speed"].get(str(T), {})
            cells.append(f"{s['vs_yardstick']:.2f}" if "vs_yardstick" in s else "-")
        rows.append([name, *cells])
    picked = {t.get("sdpa_backend") for t in result["timing"].values()} - {None}
    how = f"; SDPA's dispatch picks {', '.join(sorted(picked))}" if picked else ""
    if len(rows) == 1 or result.get("yardstick") not in paths:
        return []
    return [
        "",
        f"time / plain causal SDPA's at the same shape ({result['yardstick']}: q, k, v alike, no shaping{how}):",
        *_table(rows),
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
    comp = result["compiled"]
    if any(e.get("compiled") for e in result["paths"].values()):
        where = f" in {comp['cpu_dtype']}, timed at T<={comp['cpu_max_T']}" if result["device"] == "cpu" else ""
        lines += wrap(
            f"sdpa-compiled:<backend>: the sdpa path under torch.compile ({comp['backend']}), SDPA pinned to that "
            f"backend; checked at T={comp['check_T']} only{where}; the flag --no-compiled leaves them out"
        )
    elif not comp["run"]:
        lines += wrap("compiled competitors (sdpa-compiled:<backend>) not run: --no-compiled")
    lines.append("")
    head = ["path", "status"]
    for d in dtypes:
        head += [f"{SHORT.get(d, d)} fwd", f"{SHORT.get(d, d)} grad"]
    head += [f"T={T} ms" for T in shapes]
    rows = [head]
    status, notes = _status_cells(result)
    for name, e in result["paths"].items():
        speeds = (_speed_cell(e["speed"].get(str(T), {})) for T in shapes)
        rows.append([name, status[name], *_err_cells(e, dtypes), *speeds])
    lines += _table(rows)
    lines += [ln for note in notes for ln in wrap(note)]
    lines += _yardstick_lines(result)
    shape_desc = ", ".join(f"T={T}: B={t['B']} H={t['H']} D={t['D']} {t['dtype']}" for T, t in result["timing"].items())
    lines += ["", f"timed shapes: {shape_desc}" if shape_desc else "timed shapes: none", "", "verdicts:"]
    lines += [f"  {e['verdict']}" for e in result["paths"].values()]
    lines += [f"  {result['auto']['line']}", f"  {result['recommendation']['line']}"]
    wrong = [n for n, e in result["paths"].items() if e["status"] == "wrong"]
    lines += [
        "",
        f"FAILED: wrong on this machine: {', '.join(wrong)}"
        if wrong
        else "all available paths agree with the reference",
    ]
    return "\n".join(lines)
