"""The words and tables of DIR/verdicts.json (reporting/verdicts.py places them): the verdict table, the
paragraph of numbers under it, the frontier table, a claim's line.

A verdict word never stands alone: it is printed with its difference, the difference's 95% interval, the
seed counts of both sides and the corrected p, so a reader sees how big and how sure it is. A best value
at the grid's edge is flagged in every cell that depends on it: the grid was too narrow there.
"""

from __future__ import annotations

import math

from blocklab.reporting.parts import Table
from blocklab.reporting.sensitivity import all_capped, finite, grid, metric_text, short_key, value_key
from blocklab.reporting.settings import setting_text

EDGE = "(grid edge)"


def decimals(exp: dict) -> int:
    """Decimals of the experiment's scores: two, or enough to give its narrowest interval (or noise floor)
    two significant digits, up to four. One count for the whole table, so its numbers line up."""
    widths = [exp.get("noise_floor"), exp.get("min_detectable")]
    items = list((exp.get("groups") or {}).values()) + list((exp.get("comparisons") or {}).values())
    for item in items:
        ci = (item or {}).get("ci95")
        if isinstance(ci, list) and len(ci) == 2 and all(map(finite, ci)):
            widths.append((ci[1] - ci[0]) / 2)
    widths = [w for w in widths if finite(w) and w > 0]
    return max(2, min(4, math.ceil(-math.log10(min(widths))))) if widths else 2


def num(x, d: int, sign: bool = False) -> str:
    if not finite(x):
        return "—"
    return f"{x:+.{d}f}" if sign else f"{x:.{d}f}"


def interval(ci, d: int, sign: bool = False) -> str | None:
    if isinstance(ci, list) and len(ci) == 2 and all(map(finite, ci)):
        return f"[{num(ci[0], d, sign)}, {num(ci[1], d, sign)}]"
    return None


def p_text(p) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def seed_count(group: dict) -> int:
    return len(group.get("seeds") or group.get("scores") or [])


def settings_text(settings: dict, tuned: str | None = None) -> str:
    """{"model.block": "post-ln", "train.warmup_steps": 0} -> "block post-ln, warmup_steps 0" (a key by its last
    name, or whole where two keys share it); the tuned key is left out (each row has it in its own column)."""
    keys = [k for k in (settings or {}) if k != tuned]
    last = [str(k).rsplit(".", 1)[-1] for k in keys]
    return ", ".join(f"{n if last.count(n) == 1 else k} {setting_text(settings[k])}" for k, n in zip(keys, last)) or "—"


def range_text(r, empty: str) -> str:
    if not (isinstance(r, list) and len(r) == 2):
        return empty
    lo, hi = (setting_text(v) for v in r)
    return f"{lo} only" if value_key(r[0]) == value_key(r[1]) else f"{lo} to {hi}"


def best_text(group: dict) -> str:
    if all_capped(group):
        return "none (the cap everywhere)"
    text = setting_text(group.get("best"))
    return f"{text} {EDGE}" if group.get("best_at_edge") else text


def mean_text(group: dict, d: int) -> str:
    n = seed_count(group)
    ci = interval(group.get("ci95"), d)
    return f"{num(group.get('mean'), d)} {ci} (n={n})" if ci else f"{num(group.get('mean'), d)} (n={n}, no interval)"


def comparison_text(c: dict, n: int, n_ref: int, d: int, edge: bool) -> str:
    """ "better: -0.12 [-0.18, -0.06] (n=3 vs 3), p_holm 0.004": the word with everything that qualifies it."""
    word = c.get("verdict") or "no verdict"
    if not finite(c.get("difference")):
        return f"{word}: no difference recorded (n={n} vs {n_ref})"
    ci = interval(c.get("ci95"), d, sign=True)
    text = f"{word}: {num(c['difference'], d, sign=True)}" + (f" {ci}" if ci else "") + f" (n={n} vs {n_ref})"
    if not ci:
        text += ", no interval"
    if finite(c.get("p_holm")):
        text += f", p_holm {p_text(c['p_holm'])}"
    elif word == "one seed":
        text += ", untested (outside Holm's correction)"
    if edge:
        text += "; a best at the grid's edge: not a verdict"
    return text


def verdict_table(exp: dict, tag: str, d: int) -> Table:
    groups = exp.get("groups") or {}
    ref = exp.get("reference")
    ref_group = groups.get(ref) or {}
    ref_label = ref_group.get("label") or ref or "the reference"
    tuned = exp.get("tuned")
    short = short_key(tuned or "value")
    comps = exp.get("comparisons") or {}
    rows = []
    for name, g in groups.items():
        g = g or {}
        if name == ref:
            vs = "reference"
        elif isinstance(comps.get(name), dict):
            vs = comparison_text(
                comps[name],
                seed_count(g),
                seed_count(ref_group),
                d,
                bool(g.get("best_at_edge") or ref_group.get("best_at_edge")),
            )
        else:
            vs = "no comparison recorded"
        sens = g.get("sensitivity")
        rows.append(
            [
                str(g.get("label") or name),
                settings_text(g.get("settings") or {}, tuned),
                best_text(g),
                range_text(g.get("stable"), "—"),
                range_text(g.get("trainable"), "none"),
                num(sens, d) if finite(sens) else "—",
                mean_text(g, d),
                vs,
            ]
        )
    metric = metric_text(exp.get("metric"))
    columns = [
        "group",
        "settings",
        f"best {short}",
        "stable range",
        "trainable range",
        "sensitivity",
        f"{metric} at best: mean [95% interval] (seeds)",
        f"against {ref_label}: verdict, difference [95% interval] (seeds), p_holm",
    ]
    table = Table(f"verdict-table-{tag}", columns, rows, numeric=(5,))
    table.notes.append(
        f"Stable range: the {short} values around the best whose mean is within the tolerance "
        f"({exp.get('tolerance', '?')}) of the best mean; trainable range: those where every tuning seed completed "
        "and scored at least the tolerance better than the cap; sensitivity: the mean over the grid of |mean - best "
        "mean| (Wortsman et al. 2023). The mean and its interval (Student t) are over the final seeds at the "
        "group's best value; a difference is the group's mean minus the reference's, with Welch's interval and "
        "Holm's correction over the sweep's tested comparisons (better/worse where p_holm < 0.05)."
    )
    edges = [
        f"{g.get('label') or n} at {setting_text(g.get('best'))}, the {_end(exp, g.get('best'))} value tried"
        for n, g in groups.items()
        if (g or {}).get("best_at_edge")
    ]
    if edges:
        table.notes.append(
            f"Best at the grid's edge, marked {EDGE}: {'; '.join(edges)}. The grid was too narrow "
            "there: the best may lie beyond it, so that best value and the comparisons that rest on it "
            "are not a verdict; a grid reaching further would tell."
        )
    capped = [str(g.get("label") or n) for n, g in groups.items() if all_capped(g or {})]
    if capped:
        table.notes.append(
            f"Scored the cap at every value tried (each run failed or ended worse than the cap): "
            f"{', '.join(capped)}; no best value, stable or trainable range, or sensitivity."
        )
    return table


def _end(exp: dict, best) -> str:
    values = grid(exp)
    if values and value_key(best) == value_key(values[0]):
        return "lowest" if finite(best) else "first"
    return "highest" if finite(best) else "last"


def numbers_note(exp: dict, d: int, m: int) -> str:
    """The noise floor, the smallest detectable difference, the eval noise and whether tuning runs were reused."""
    groups = exp.get("groups") or {}
    ref = groups.get(exp.get("reference")) or {}
    ref_label = ref.get("label") or exp.get("reference") or "the reference"
    floor, least, noise = exp.get("noise_floor"), exp.get("min_detectable"), exp.get("eval_noise")
    parts = [
        f"Noise floor: {num(floor, d)}, the standard deviation of the reference ({ref_label}) over its "
        f"{seed_count(ref)} final seeds."
        if finite(floor)
        else f"Noise floor: unknown (the reference, {ref_label}, has {seed_count(ref)} final seed(s))."
    ]
    if finite(least):
        parts.append(
            f"Smallest detectable difference: {num(least, d)}, the half-width of a Welch interval at level "
            f"1 - 0.05/{max(m, 1)} ({m} tested comparison{'s' if m != 1 else ''} in the sweep) with both "
            "sides at the reference's standard deviation and seed count: a smaller true difference would "
            "likely read as indistinguishable."
        )
    else:
        parts.append("Smallest detectable difference: unknown (it needs the reference's spread over seeds).")
    if finite(noise):
        rel = (
            (
                f", {floor / noise:.1f} times below the noise floor"
                if finite(floor) and noise < floor
                else ", not below the noise floor: more eval batches would sharpen the comparison"
            )
            if finite(floor) and noise > 0
            else ""
        )
        what = (
            "the median standard error of a difference between a group's final eval loss and the reference's "
            "over the eval batches both saw (paired, seed by seed)"
            if exp.get("eval_noise_paired")
            else "the median standard error of one run's final eval loss over its eval batches (unpaired: the "
            "runs predate per-batch eval losses, so the spread between batches, common to every run, counts too)"
        )
        parts.append(f"Eval noise: {noise:.2g}, {what}{rel}.")
    else:
        parts.append("Eval noise: not recorded.")
    reused = exp.get("tuning_runs_reused")
    parts.append(
        "Tuning runs reused as final seeds: "
        + (
            "yes (the tuning seeds at the best value count among the final seeds)."
            if reused
            else "no (the final seeds are runs of their own)."
            if reused is not None
            else "not recorded."
        )
    )
    return " ".join(parts)


def frontier_table(exp: dict, tag: str) -> Table:
    groups = exp.get("groups") or {}
    ref = exp.get("reference")
    rows = []
    for name, f in (exp.get("frontier") or {}).items():
        f = f or {}
        fit = f.get("fit") or {}
        fit_text = f"{fit['a']:.3g} C^-{fit['alpha']:.3g}" if finite(fit.get("a")) and finite(fit.get("alpha")) else "—"
        x, ci = f.get("multiplier"), interval(f.get("multiplier_ci95"), 2)
        mult = "1 (reference)" if name == ref else (f"{x:.2f}x" + (f" {ci}" if ci else "") if finite(x) else "—")
        rows.append(
            [str((groups.get(name) or {}).get("label") or name), str(len(f.get("points") or [])), fit_text, mult]
        )
    columns = ["group", "sizes", "fit: score = a C^-alpha", "compute multiplier [95% interval]"]
    return Table(
        f"frontier-table-{tag}",
        columns,
        rows,
        numeric=(1,),
        notes=[
            "Compute multiplier: the reference's training FLOPs to reach the group's score at the largest size, divided "
            "by the group's (above 1: the group needs less compute for the same score); its interval is a bootstrap "
            "over seeds."
        ],
    )


def claim_text(c: dict) -> str:
    """ "paper — claim: STATUS. why"."""
    why = str(c.get("why") or "").strip()
    if why and why[-1] not in ".!?":
        why += "."
    return f"{c.get('paper') or '?'} — {c.get('claim') or '?'}: {c.get('status') or 'no status'}." + (
        f" {why}" if why else ""
    )
