"""The words and tables of DIR/verdicts.json (reporting/verdicts.py places them): the verdict table, the
paragraph of numbers under it, the frontier table, a claim's line, the terminal's line per comparison.

A verdict word never stands alone: it is printed beside its difference and the family's interval (the one the
word was decided at, so word and interval agree), the test and its seeds, the failures, and for an unresolved
comparison `mde80`, the difference it would have seen with 80% power. A best value at the grid's edge is
flagged in every cell that depends on it: the grid was too narrow there.
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
    widths = [exp.get("noise_floor")] + [c.get("mde80") for c in (exp.get("comparisons") or {}).values() if c]
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
        best = group.get("best")
        return "none (failed at every value)" + (f"; final seeds at {setting_text(best)}" if best is not None else "")
    text = setting_text(group.get("best"))
    return f"{text} {EDGE}" if group.get("best_at_edge") else text


def mean_text(group: dict, d: int) -> str:
    """ "4.123 [4.05, 4.20] (4 completed, 1 failed)": the mean and interval over the completed final seeds."""
    scores = group.get("scores") or []
    done = sum(1 for s in scores if finite(s))
    failed = group.get("failed") or 0
    seeds = f"{done} completed" + (f", {failed} failed" if failed else "")
    if not done:
        return f"— ({seeds})"
    ci = interval(group.get("ci95"), d)
    return (
        f"{num(group.get('mean'), d)} {ci} ({seeds})" if ci else f"{num(group.get('mean'), d)} ({seeds}, no interval)"
    )


def comparison_text(c: dict, n: int, n_ref: int, d: int, edge: bool) -> str:
    """ "better: -0.12, family interval [-0.18, -0.06] (paired, 5 seeds, r 0.87), p_holm 0.004": the word with
    everything that qualifies it; `n`, `n_ref`: the seeds each side ran."""
    word = c.get("verdict") or "no verdict"
    fails = c.get("failures")
    failed = ""
    if isinstance(fails, list) and len(fails) == 4 and (fails[0] or fails[2]):
        p = f", p_fail_holm {p_text(c['p_fail_holm'])}" if finite(c.get("p_fail_holm")) else ""
        failed = f"; failed {fails[0]}/{fails[1]} against {fails[2]}/{fails[3]}{p}"
    if not finite(c.get("difference")):
        return f"{word}: no difference (seeds {n} vs {n_ref}){failed}"
    ci = interval(c.get("ci_family") or c.get("ci95"), d, sign=True)
    which = "family interval" if c.get("ci_family") else "95% interval"
    test = c.get("test") or "untested"
    r = c.get("correlation")
    seeds = (c.get("n") or [n, n_ref])[0]
    text = f"{word}: {num(c['difference'], d, sign=True)}"
    text += f", {which} {ci}" if ci else ", no interval"
    text += f" ({test}, {seeds} seed{'s' if seeds != 1 else ''}" + (f", r {r:.2f}" if finite(r) else "") + ")"
    if finite(c.get("p_holm")):
        text += f", p_holm {p_text(c['p_holm'])}"
    elif word == "one seed":
        text += ", untested (outside the family)"
    text += failed
    if word == "unresolved" and finite(c.get("mde80")):
        text += f"; mde80 {num(c['mde80'], d)}"
    if edge:
        text += "; a best at the grid's edge: not a verdict"
    return text


def comparison_line(c: dict) -> str:
    """The terminal's line for one comparison (three decimals)."""
    fails = c.get("failures") or []
    n, n_ref = (fails[1], fails[3]) if len(fails) == 4 else ((c.get("n") or [0, 0])[0],) * 2
    return comparison_text(c, n, n_ref, 3, False)


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
        f"against {ref_label}: verdict, difference, family interval (test, seeds), p_holm, failures, mde80",
    ]
    table = Table(f"verdict-table-{tag}", columns, rows, numeric=(5,))
    table.notes.append(
        f"A run completes, or fails (diverged, stalled, or ended within the tolerance {exp.get('tolerance', '?')} of "
        "the cap): failures are counted, never scored. Stable range: the "
        f"{short} values around the best whose mean is within the tolerance of the best mean; trainable range: "
        "those where every tuning seed completed; sensitivity: the mean over the grid of |mean - best mean|, a "
        "value with a failed seed at the cap (Wortsman et al. 2023). The mean and its 95% interval (Student t) "
        "are over the completed final seeds at the group's best value. A comparison uses the seeds both sides "
        "completed: the per-seed differences (paired t) with 4 or more, else Welch; failures by Boschloo's exact "
        "test; Holm's correction over the family (every test of the metric in the sweep). The family interval "
        "is at level 1 - 0.05/m, the level each word was decided at. Equivalent means two one-sided tests "
        f"against the margin {exp.get('margin', '?')}; unresolved means none of the words applied, and mde80 is "
        "the true difference the test would have detected with 80% power."
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
            f"No value completed on every tuning seed: {', '.join(capped)}; no best value, stable or trainable "
            "range, or sensitivity (the final seeds ran at the value with the most completed seeds)."
        )
    extended = sorted(
        {
            setting_text(p.get("value"))
            for g in groups.values()
            for p in (g or {}).get("curve") or []
            if p.get("extended")
        }
    )
    if extended:
        table.notes.append(f"Values added beyond the grid's edges where a best sat on one: {', '.join(extended)}.")
    return table


def _end(exp: dict, best) -> str:
    values = grid(exp)
    if values and value_key(best) == value_key(values[0]):
        return "lowest" if finite(best) else "first"
    return "highest" if finite(best) else "last"


def numbers_note(exp: dict, d: int, m: int) -> str:
    """The noise floor, the spread over seeds, the family, the eval noise and whether tuning runs were reused."""
    groups = exp.get("groups") or {}
    ref = groups.get(exp.get("reference")) or {}
    ref_label = ref.get("label") or exp.get("reference") or "the reference"
    floor, pooled, noise = exp.get("noise_floor"), exp.get("pooled_sd"), exp.get("eval_noise")
    parts = [
        f"Noise floor: {num(floor, d)}, the standard deviation of the reference ({ref_label}) over its completed "
        "final seeds."
        if finite(floor)
        else f"Noise floor: unknown (the reference, {ref_label}, completed fewer than two final seeds)."
    ]
    if finite(pooled):
        parts.append(f"Spread over seeds (the pooled within-group standard deviation): {num(pooled, d)}.")
    size = exp.get("family_size", m)
    parts.append(
        f"Family: {size} test{'s' if size != 1 else ''} of the sweep's primary metric (score and failure tests), "
        f"each word decided at level 0.05/{max(size or 1, 1)}."
    )
    auto = exp.get("seeds_auto")
    if isinstance(auto, dict) and finite(auto.get("seeds")):
        parts.append(
            f"Seeds chosen by power: {auto['seeds']} final seeds ({auto.get('why')}), from a pooled sd of "
            f"{num(auto.get('pooled_sd'), d)} over the first {auto.get('min_seeds')} seeds, for mde {auto.get('mde')} "
            f"at power {auto.get('power')}."
        )
    if finite(noise):
        ratio = noise / pooled if finite(pooled) and pooled > 0 else None
        what = (
            "the median standard error of a difference between a group's final eval loss and the reference's "
            "over the eval batches both saw (paired, seed by seed)"
            if exp.get("eval_noise_paired")
            else "the median standard error of one run's final eval loss over its eval batches"
        )
        rule = (
            f"; {ratio:.2f} of the spread over seeds: below a third, the eval set adds little"
            if ratio is not None and ratio <= 1 / 3
            else f"; {ratio:.2f} of the spread over seeds: above a third, so the tests' variance includes it (each "
            "seed's score carries its eval noise)"
            if ratio is not None
            else ""
        )
        parts.append(f"Eval noise: {noise:.2g}, {what}{rule}.")
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
    rule = str(c.get("rule") or "").strip()
    return (
        f"{c.get('paper') or '?'} — {c.get('claim') or '?'}: {c.get('status') or 'no status'}."
        + (f" {why}" if why else "")
        + (f" Rule: {rule}" if rule else "")
    )
