"""The figures of DIR/verdicts.json (docs/verdicts.md): the score against the tuned value, and the compute frontier.

They draw what verdicts.json holds and compute nothing of their own (the verdicts have one home,
experiments/verdicts.py): per-value means, seeds, caps and fits are read, not derived. Each artist
that stands for a group carries a gid ("curve:GROUP", "seeds:GROUP", "capped:GROUP", "best:GROUP",
"points:GROUP", "fit:GROUP", "cap"), so what a figure drew can be checked artist by artist.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from blocklab.reporting import figures as F
from blocklab.reporting.settings import setting_text
from blocklab.verdicts_record import CurvePoint, Experiment, Frontier, Group

_STYLES = ["-", "--", "-.", ":"]


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def value_key(v) -> str:
    """A tuned value as a key: 0.001 and 1e-3 agree, as do equal strings and lists."""
    return json.dumps(v, sort_keys=True)


def metric_text(metric: str) -> str:
    """ "final_eval_loss" -> "final eval loss" (a title capitalises it)."""
    return str(metric or "score").replace("_", " ")


def cap_text(metric: str) -> str:
    """What the cap is: the unigram model's loss, zero BLEU, the majority-class score."""
    m = str(metric).lower()
    return "unigram loss" if "loss" in m else ("zero BLEU" if "bleu" in m else "majority-class score")


def short_key(key: str) -> str:
    """ "train.lr" -> "lr": the tuned setting as a title says it."""
    return str(key).rsplit(".", 1)[-1]


def group_styles(groups: dict) -> dict[str, tuple[str, str]]:
    """{group: (colour, line style)}: the colour of its block (settings' "model.block"), each further group of
    the same block the next line style; a group that names no block gets a colour of matplotlib's cycle."""
    seen: dict[str, int] = {}
    out = {}
    for i, (name, g) in enumerate(groups.items()):
        block = (Group.of(g or {}).settings or {}).get("model.block")
        key = str(block) if block else f"_{name}"
        k = seen.get(key, 0)
        seen[key] = k + 1
        out[name] = (F.block_colour(str(block)) if block else f"C{i % 10}", _STYLES[k % len(_STYLES)])
    return out


def grid(exp: Experiment | dict) -> list:
    """The tuned grid: the experiment's `values`, else the values its curves hold, in first-seen order."""
    exp = Experiment.of(exp)
    if isinstance(exp.values, list) and exp.values:
        return exp.values
    seen = {}
    for g in (exp.groups or {}).values():
        for point in Group.of(g or {}).curve or []:
            seen.setdefault(value_key(point.value), point.value)
    return list(seen.values())


def log_scale(values: list) -> bool:
    """A log x axis when every tuned value is a positive number; categorical positions otherwise."""
    return bool(values) and all(finite(v) and v > 0 for v in values)


def tuning_seeds(exp: Experiment | dict) -> list:
    groups = Experiment.of(exp).groups or {}
    seeds = {s for g in groups.values() for p in Group.of(g or {}).curve or [] for s in p.seeds or []}
    return sorted(seeds, key=str)


FAILED = ("diverged", "stalled", "plateau")


def all_capped(group: Group | dict) -> bool:
    """No value of the group's grid completed on every tuning seed: no best value, ranges or sensitivity."""
    g = Group.of(group)
    if g.best_completed is False:
        return True
    return all(x is None for x in (g.best_at_edge, g.stable, g.trainable, g.sensitivity))


def _seed_points(point: CurvePoint, cap) -> list[tuple[float, bool]]:
    """[(score, failed)] of a curve point's seeds: a completed seed at its score; a failed one at its final
    score where it trained to the end (it ended on the plateau), else at the cap."""
    scores = point.scores or []
    statuses = point.statuses or []
    raw = point.raw or [None] * len(scores)
    capped = point.extra.get("capped")  # verdicts.json files written before failures were counted apart
    out = []
    for i, score in enumerate(scores):
        status = statuses[i] if i < len(statuses) else None
        failed = status in FAILED or status not in (None, "completed") or (isinstance(capped, list) and capped[i])
        if not failed and finite(score):
            out.append((float(score), False))
        elif finite(raw[i] if i < len(raw) else None) and status == "plateau":
            out.append((float(raw[i]), True))
        elif finite(cap):
            out.append((float(cap), True))
    return out


def draw_sensitivity(ax, exp: Experiment | dict) -> int:
    """Draw the score against the tuned value on `ax`: per group a line through its per-value means, every
    seed's point (a failed one marked x), the band from the lowest to the highest seed, its best
    value starred; the cap dotted. Returns the number of groups drawn."""
    exp = Experiment.of(exp)
    values = grid(exp)
    log = log_scale(values)
    pos = {value_key(v): (float(v) if log else float(i)) for i, v in enumerate(values)}
    cap = exp.cap
    groups = exp.groups or {}
    styles = group_styles(groups)
    drawn = 0
    for name, g in groups.items():
        g = Group.of(g or {})
        colour, ls = styles[name]
        points = sorted(
            ((pos[value_key(p.value)], p) for p in g.curve or [] if value_key(p.value) in pos),
            key=lambda t: t[0],
        )
        if not points:
            continue
        drawn += 1
        line = [(x, float(p.mean)) for x, p in points if finite(p.mean)]
        ax.plot(
            [x for x, _ in line],
            [y for _, y in line],
            color=colour,
            ls=ls,
            lw=1.8,
            marker="none",
            label=str(g.label or name),
            gid=f"curve:{name}",
        )
        seeds = [(x, s) for x, p in points for s in _seed_points(p, cap)]
        for flag, marker, gid in ((False, "o", "seeds"), (True, "x", "capped")):
            xy = [(x, y) for x, (y, c) in seeds if c == flag]
            if xy:
                ax.scatter(
                    [x for x, _ in xy],
                    [y for _, y in xy],
                    color=colour,
                    marker=marker,
                    s=22,
                    alpha=0.8,
                    lw=1.5 if flag else 0.5,
                    zorder=3,
                    gid=f"{gid}:{name}",
                )
        spans = [(x, [y for y, _ in _seed_points(p, cap)]) for x, p in points]
        spans = [(x, min(ys), max(ys)) for x, ys in spans if ys]
        if len(spans) > 1:
            ax.fill_between(
                [s[0] for s in spans],
                [s[1] for s in spans],
                [s[2] for s in spans],
                color=colour,
                alpha=0.12,
                lw=0,
                gid=f"band:{name}",
            )
        best = pos.get(value_key(g.best))
        at_best = next((float(p.mean) for x, p in points if x == best and finite(p.mean)), None)
        if best is not None and at_best is not None and not all_capped(g):
            ax.scatter(
                [best],
                [at_best],
                marker="*",
                s=220,
                color=colour,
                edgecolor="black",
                lw=0.8,
                zorder=4,
                gid=f"best:{name}",
            )
    if finite(cap):
        ax.axhline(
            cap,
            color="black",
            ls=":",
            lw=1.2,
            gid="cap",
            label=f"cap: {cap_text(exp.metric)} {cap:.3g} (a run ending near it failed)",
        )
    tuned = str(exp.tuned or "tuned value")
    if log:  # ticks at the grid's values: the reader reads off which values were tried
        ax.set_xscale("log")
        ax.set_xticks([float(v) for v in values], [setting_text(v) for v in values])
        ax.minorticks_off()
        ax.set_xlabel(f"{tuned} (log scale)")
    else:
        ax.set_xticks(range(len(values)), [setting_text(v) for v in values])
        ax.set_xlabel(tuned)
    better = "lower" if exp.lower_is_better is not False else "higher"
    ax.set_ylabel(f"{metric_text(exp.metric)} ({better} is better)")
    seeds = tuning_seeds(exp)
    said = f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds)) or '?'}"
    size = ", at the largest size" if exp.sizes else ""
    ax.set_title(
        f"{metric_text(exp.metric).capitalize()} against {tuned}, each group tuned on {said}"
        f"{size} (star: best; x: a failed seed)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    return drawn


def draw_frontier(ax, exp: Experiment | dict) -> int:
    """Draw the mean score against training FLOPs (log x): each group's points with their 95% intervals as
    error bars, and its fitted power law score = a * C^-alpha. Returns the number of groups drawn."""
    exp = Experiment.of(exp)
    frontier = exp.frontier or {}
    groups = exp.groups or {}
    styles = group_styles({g: groups.get(g) for g in frontier})
    drawn = 0
    for name, f in frontier.items():
        f = Frontier.of(f or {})
        colour, ls = styles[name]
        pts = sorted(
            (p for p in f.points or [] if finite(p.flops) and p.flops > 0 and finite(p.mean)),
            key=lambda p: p.flops,
        )
        if not pts:
            continue
        drawn += 1
        xs = np.array([p.flops for p in pts], dtype=float)
        ys = np.array([p.mean for p in pts], dtype=float)
        err = np.zeros((2, len(pts)))
        for i, p in enumerate(pts):
            ci = p.ci95
            if isinstance(ci, list) and len(ci) == 2 and all(map(finite, ci)):
                err[:, i] = [max(0.0, ys[i] - ci[0]), max(0.0, ci[1] - ys[i])]
        label = str(Group.of(groups.get(name) or {}).label or name)
        bars = ax.errorbar(xs, ys, yerr=err, fmt="o", color=colour, capsize=3, ms=5, label=label)
        bars[0].set_gid(f"points:{name}")
        fit = f.fit or {}
        if finite(fit.get("a")) and finite(fit.get("alpha")):
            cs = np.geomspace(xs.min() / 1.5, xs.max() * 1.5, 60)
            ax.plot(
                cs,
                fit["a"] * cs ** -fit["alpha"],
                color=colour,
                ls=ls,
                lw=1.4,
                gid=f"fit:{name}",
                label=f"{label} fit: {fit['a']:.3g} C^-{fit['alpha']:.3g}",
            )
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs (the model's count; log scale)")
    better = "lower" if exp.lower_is_better is not False else "higher"
    metric = metric_text(exp.metric)
    ax.set_ylabel(f"mean {metric} ({better} is better)")
    ax.set_title(
        f"{metric.capitalize()} against training FLOPs at each size (each point at its own best "
        f"{short_key(exp.tuned or 'value')})",
        fontsize=10,
    )
    ax.grid(alpha=0.3, which="both")
    return drawn


def _plot(draw, exp: Experiment | dict, path: Path) -> Path | None:
    fig, ax = F.new_figure()  # a bare matplotlib Figure: nothing global to close when nothing was drawn
    if not draw(ax, exp):
        return None
    F.place_legend(ax, len(ax.get_legend_handles_labels()[0]))
    return F.save_figure(fig, path)


def plot_sensitivity(exp: Experiment | dict, path: Path) -> Path | None:
    return _plot(draw_sensitivity, exp, path)


def plot_frontier(exp: Experiment | dict, path: Path) -> Path | None:
    return _plot(draw_frontier, exp, path)
