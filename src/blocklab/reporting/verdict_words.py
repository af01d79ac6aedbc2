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
from blocklab.verdicts_record import Claim, Comparison, Experiment, Frontier, Group

EDGE = "(grid edge)"


def decimals(exp: Experiment | dict) -> int:
    """Decimals of the experiment's scores: two, or enough to give its narrowest interval (or noise floor)
    two significant digits, up to four. One count for the whole table, so its numbers line up."""
    exp = Experiment.of(exp)
    comps = [c for c in (exp.comparisons or {}).values() if c]
    widths = [exp.noise_floor] + [c.mde80 for c in comps]
    for item in [g for g in (exp.groups or {}).values() if g] + comps:
        ci = item.ci95
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


def seed_count(group: Group | dict) -> int:
    group = Group.of(group)
    return len(group.seeds or group.scores or [])


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


def best_text(group: Group | dict) -> str:
    group = Group.of(group)
    if all_capped(group):
        best = group.best
        return "none (failed at every value)" + (f"; final seeds at {setting_text(best)}" if best is not None else "")
    text = setting_text(group.best)
    return f"{text} {EDGE}" if group.best_at_edge else text


def mean_text(group: Group | dict, d: int) -> str:
    """ "4.123 [4.05, 4.20] (4 completed, 1 failed)": the mean and interval over the completed final seeds."""
    group = Group.of(group)
    scores = group.scores or []
    done = sum(1 for s in scores if finite(s))
    failed = group.failed or 0
    seeds = f"{done} completed" + (f", {failed} failed" if failed else "")
    if not done:
        return f"— ({seeds})"
    ci = interval(group.ci95, d)
    return f"{num(group.mean, d)} {ci} ({seeds})" if ci else f"{num(group.mean, d)} ({seeds}, no interval)"


def comparison_text(c: Comparison | dict, n: int, n_ref: int, d: int, edge: bool) -> str:
    """ "better: -0.12, family interval [-0.18, -0.06] (paired, 5 seeds, r 0.87), p_holm 0.004": the word with
    everything that qualifies it; `n`, `n_ref`: the seeds each side ran."""
    c = Comparison.of(c)
    word = c.verdict or "no verdict"
    fails = c.failures
    failed = ""
    if isinstance(fails, list) and len(fails) == 4 and (fails[0] or fails[2]):
        p = f", p_fail_holm {p_text(c.p_fail_holm)}" if finite(c.p_fail_holm) else ""
        failed = f"; failed {fails[0]}/{fails[1]} against {fails[2]}/{fails[3]}{p}"
    if not finite(c.difference):
        return f"{word}: no difference (seeds {n} vs {n_ref}){failed}"
    ci = interval(c.ci_family or c.ci95, d, sign=True)
    which = "family interval" if c.ci_family else "95% interval"
    test = c.test or "untested"
    r = c.correlation
    seeds = (c.n or [n, n_ref])[0]
    text = f"{word}: {num(c.difference, d, sign=True)}"
    text += f", {which} {ci}" if ci else ", no interval"
    text += f" ({test}, {seeds} seed{'s' if seeds != 1 else ''}" + (f", r {r:.2f}" if finite(r) else "") + ")"
    if finite(c.p_holm):
        text += f", p_holm {p_text(c.p_holm)}"
    elif word == "one seed":
        text += ", untested (outside the family)"
    text += failed
    if word == "unresolved" and finite(c.mde80):
        text += f"; mde80 {num(c.mde80, d)}"
    if edge:
        text += "; a best at the grid's edge: not a verdict"
    return text


def comparison_line(c: Comparison | dict) -> str:
    """The terminal's line for one comparison (three decimals)."""
    c = Comparison.of(c)
    fails = c.failures or []
    n, n_ref = (fails[1], fails[3]) if len(fails) == 4 else ((c.n or [0, 0])[0],) * 2
    return comparison_text(c, n, n_ref, 3, False)


def verdict_table(exp: Experiment | dict, tag: str, d: int) -> Table:
    exp = Experiment.of(exp)
    groups = {n: Group.of(g or {}) for n, g in (exp.groups or {}).items()}
    ref = exp.reference
    ref_group = groups.get(ref) or Group()
    ref_label = ref_group.label or ref or "the reference"
    tuned = exp.tuned
    short = short_key(tuned or "value")
    comps = exp.comparisons or {}
    rows = []
    for name, g in groups.items():
        if name == ref:
            vs = "reference"
        elif isinstance(comps.get(name), Comparison):
            vs = comparison_text(
                comps[name], seed_count(g), seed_count(ref_group), d, bool(g.best_at_edge or ref_group.best_at_edge)
            )
        else:
            vs = "no comparison recorded"
        sens = g.sensitivity
        rows.append(
            [
                str(g.label or name),
                settings_text(g.settings or {}, tuned),
                best_text(g),
                range_text(g.stable, "—"),
                range_text(g.trainable, "none"),
                num(sens, d) if finite(sens) else "—",
                mean_text(g, d),
                vs,
            ]
        )
    metric = metric_text(exp.metric)
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
        f"A run completes, or fails (diverged, stalled, or ended within the tolerance {_or(exp.tolerance)} of "
        "the cap): failures are counted, never scored. Stable range: the "
        f"{short} values around the best whose mean is within the tolerance of the best mean; trainable range: "
        "those where every tuning seed completed; sensitivity: the mean over the grid of |mean - best mean|, a "
        "value with a failed seed at the cap (Wortsman et al. 2023). The mean and its 95% interval (Student t) "
        "are over the completed final seeds at the group's best value. A comparison uses the seeds both sides "
        "completed: the per-seed differences (paired t) with 4 or more, else Welch; failures by Boschloo's exact "
        "test; Holm's correction over the family (every test of the metric in the sweep). The family interval "
        "is at level 1 - 0.05/m, the level each word was decided at. Equivalent means two one-sided tests "
        f"against the margin {_or(exp.margin)}; unresolved means none of the words applied, and mde80 is "
        "the true difference the test would have detected with 80% power."
    )
    edges = [
        f"{g.label or n} at {setting_text(g.best)}, the {_end(exp, g.best)} value tried"
        for n, g in groups.items()
        if g.best_at_edge
    ]
    if edges:
        table.notes.append(
            f"Best at the grid's edge, marked {EDGE}: {'; '.join(edges)}. The grid was too narrow "
            "there: the best may lie beyond it, so that best value and the comparisons that rest on it "
            "are not a verdict; a grid reaching further would tell."
        )
    capped = [str(g.label or n) for n, g in groups.items() if all_capped(g)]
    if capped:
        table.notes.append(
            f"No value completed on every tuning seed: {', '.join(capped)}; no best value, stable or trainable "
            "range, or sensitivity (the final seeds ran at the value with the most completed seeds)."
        )
    extended = sorted({setting_text(p.value) for g in groups.values() for p in g.curve or [] if p.extended})
    if extended:
        table.notes.append(f"Values added beyond the grid's edges where a best sat on one: {', '.join(extended)}.")
    return table


def _or(value, missing: str = "?"):
    """A setting of the experiment as the notes print it: `missing` where the file has none."""
    return missing if value is None else value


def _end(exp: Experiment, best) -> str:
    values = grid(exp)
    if values and value_key(best) == value_key(values[0]):
        return "lowest" if finite(best) else "first"
    return "highest" if finite(best) else "last"


def numbers_note(exp: Experiment | dict, d: int, m: int) -> str:
    """The noise floor, the spread over seeds, the family, the eval noise and whether tuning runs were reused."""
    exp = Experiment.of(exp)
    ref = Group.of((exp.groups or {}).get(exp.reference) or {})
    ref_label = ref.label or exp.reference or "the reference"
    floor, pooled, noise = exp.noise_floor, exp.pooled_sd, exp.eval_noise
    parts = [
        f"Noise floor: {num(floor, d)}, the standard deviation of the reference ({ref_label}) over its completed "
        "final seeds."
        if finite(floor)
        else f"Noise floor: unknown (the reference, {ref_label}, completed fewer than two final seeds)."
    ]
    if finite(pooled):
        parts.append(f"Spread over seeds (the pooled within-group standard deviation): {num(pooled, d)}.")
    size = _or(exp.family_size, m)
    parts.append(
        f"Family: {size} test{'s' if size != 1 else ''} of the sweep's primary metric (score and failure tests), "
        f"each word decided at level 0.05/{max(size or 1, 1)}."
    )
    auto = exp.seeds_auto
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
            if exp.eval_noise_paired
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
    reused = exp.tuning_runs_reused
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


def frontier_table(exp: Experiment | dict, tag: str) -> Table:
    exp = Experiment.of(exp)
    groups = exp.groups or {}
    ref = exp.reference
    rows = []
    for name, f in (exp.frontier or {}).items():
        f = Frontier.of(f or {})
        fit = f.fit or {}
        fit_text = f"{fit['a']:.3g} C^-{fit['alpha']:.3g}" if finite(fit.get("a")) and finite(fit.get("alpha")) else "—"
        x, ci = f.multiplier, interval(f.multiplier_ci95, 2)
        mult = "1 (reference)" if name == ref else (f"{x:.2f}x" + (f" {ci}" if ci else "") if finite(x) else "—")
        rows.append([str(Group.of(groups.get(name) or {}).label or name), str(len(f.points or [])), fit_text, mult])
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


def claim_text(c: Claim | dict) -> str:
    """ "paper — claim: STATUS. why"."""
    c = Claim.of(c)
    why = str(c.why or "").strip()
    if why and why[-1] not in ".!?":
        why += "."
    rule = str(c.rule or "").strip()
    return (
        f"{c.paper or '?'} — {c.claim or '?'}: {c.status or 'no status'}."
        + (f" {why}" if why else "")
        + (f" Rule: {rule}" if rule else "")
    )
