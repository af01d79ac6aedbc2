"""The interactions of DIR/verdicts.json in the report (docs/verdicts.md, "Factors"): per factor, each group's
difference from the reference at each level with its family interval, and the table of interactions."""

from __future__ import annotations

from pathlib import Path

from blocklab.reporting import figures as F
from blocklab.reporting.parts import Figure, Section, Table
from blocklab.reporting.sensitivity import finite
from blocklab.reporting.verdict_words import interval, num, p_text
from blocklab.verdicts_record import Experiment, Group, Interaction, VerdictsFile

CAPTION = (
    "Each group's final eval loss minus the reference's at each level of the factor (each level tuned on its own), "
    "with the family interval its word was decided at; a line that crosses zero between levels changes order."
)


def cells(verdicts: VerdictsFile | dict, name: str) -> list[tuple[str, Experiment]]:
    """(level value, experiment) of factor experiment `name`, in the levels' order."""
    experiments = (VerdictsFile.of(verdicts).experiments or {}).values()
    found = [(e.factor["value"], e) for e in experiments if (e.factor or {}).get("name") == name]
    levels = found[0][1].factor["levels"] if found else []
    return sorted(found, key=lambda x: levels.index(x[0]) if x[0] in levels else len(levels))


def draw(ax, verdicts: VerdictsFile | dict, name: str) -> int:
    levels = cells(verdicts, name)
    by_group: dict[str, list] = {}
    for i, (_, exp) in enumerate(levels):
        for g, c in (exp.comparisons or {}).items():
            group = Group.of(exp.groups.get(g) or {})
            base = (group.facts or {}).get("factor_group", g)
            label = str(group.label or g).rsplit(",", 1)[0]
            block = (group.settings or {}).get("model.block")
            by_group.setdefault(base, []).append((i, c, label, block))
    for base, points in by_group.items():
        xs = [i for i, c, _, _ in points if finite(c.difference)]
        ys = [c.difference for _, c, _, _ in points if finite(c.difference)]
        if not xs:
            continue
        err = [[], []]
        for _, c, _, _ in points:
            if not finite(c.difference):
                continue
            lo, hi = c.ci_family or [c.difference] * 2
            err[0].append(c.difference - lo)
            err[1].append(hi - c.difference)
        colour = F.block_colour(str(points[0][3])) if points[0][3] else None
        bars = ax.errorbar(xs, ys, yerr=err, fmt="o-", capsize=3, color=colour, label=points[0][2])
        bars[0].set_gid(f"factor:{base}")
    ax.axhline(0.0, color="black", lw=1, ls=":")
    ax.set_xticks(range(len(levels)), [str(v) for v, _ in levels])
    key = levels[0][1].factor["key"] if levels else "factor"
    ax.set_xlabel(key)
    ax.set_ylabel("difference from the reference (lower is better)")
    ax.set_title(f"Each group against the reference at each {key}", fontsize=10)
    ax.grid(alpha=0.3)
    return len(by_group)


def table(interactions: dict, name: str) -> Table:
    """`interactions`: {group: Interaction (or its JSON object)} of one factor."""
    interactions = {group: Interaction.of(i) for group, i in interactions.items()}
    rows = []
    for group, i in interactions.items():
        d = i.difference or [None, None]
        ci = interval(i.ci_family, 3, sign=True) or "no interval"
        p = p_text(i.p_holm) if finite(i.p_holm) else "untested"
        rows.append(
            [
                group,
                " / ".join(num(x, 3, sign=True) for x in d),
                f"{num(i.interaction, 3, sign=True)} {ci}",
                f"{len(i.seeds or [])}",
                p,
                i.verdict or "—",
            ]
        )
    levels = next(iter(interactions.values())).levels if interactions else ["A", "B"]
    columns = [
        "group",
        f"difference from the reference at {' / '.join(map(str, levels))}",
        "interaction (second minus first) [family interval]",
        "seeds",
        "p_holm",
        "verdict",
    ]
    t = Table(f"interactions-{F.slug(name)}", columns, rows)
    t.notes.append(
        "Interaction: per seed, the group's difference from the reference at the second level minus that at the "
        "first, tested paired (the interactions are a family of their own). flips: the difference is significant "
        "at both levels with opposite signs; same order: significant at both with one sign, or the interaction "
        "equivalent to 0; else unresolved."
    )
    return t


def factor_sections(verdicts: VerdictsFile | dict, fig_dir: Path) -> list[Section]:
    verdicts = VerdictsFile.of(verdicts)
    out = []
    for name, interactions in (verdicts.interactions or {}).items():
        sec = Section(f"factor-{F.slug(name)}", f"{name}: does the order change with the factor?")
        fig, ax = F.new_figure()
        if draw(ax, verdicts, name):
            F.place_legend(ax, len(ax.get_legend_handles_labels()[0]))
            sec.figures.append(
                Figure(F.save_figure(fig, fig_dir / f"factor_{F.slug(name)}.png"), "Differences by level", CAPTION)
            )
        sec.tables.append(table(interactions, name))
        out.append(sec)
    return out
