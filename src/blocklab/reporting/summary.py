"""`blocklab report DIR --summary`: the verdict tables and the claims of DIR/verdicts.json as markdown, for any text
that states a result (a results folder's README, the README's demo section). Prose around it may interpret;
the numbers and words come from here, so they cannot drift from the file."""

from __future__ import annotations

from blocklab.reporting.sensitivity import finite, short_key
from blocklab.reporting.verdict_words import best_text, comparison_text, decimals, mean_text, range_text, seed_count
from blocklab.verdicts_record import Claim, Comparison, Experiment, Group, Interaction, SecondaryMetric, VerdictsFile

BEGIN = "<!-- blocklab summary: {path} -->"
END = "<!-- end of blocklab summary -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(cells) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def experiment_markdown(name: str, exp: Experiment | dict, level: str = "###") -> list[str]:
    exp = Experiment.of(exp)
    groups, comps = exp.groups or {}, exp.comparisons or {}
    ref = exp.reference
    ref_group = groups.get(ref) or Group()
    d = decimals(exp)
    tuned = short_key(exp.tuned or "value")
    cap = exp.cap
    lines = [
        f"{level} {exp.title or name}",
        "",
        f"Reference: {ref_group.label or ref}. Score: {str(exp.metric).replace('_', ' ')} "
        f"({'lower' if exp.lower_is_better is not False else 'higher'} is better)"
        + (f"; cap {cap:.3f} (the unigram model's)" if finite(cap) else "")
        + f"; tolerance {exp.tolerance}; margin {exp.margin}; family of {exp.family_size} "
        f"tests (each word at level 0.05/{max(1, exp.family_size or 1)}); tuning seeds "
        f"{', '.join(map(str, exp.tuning_seeds or [])) or 'none'}.",
        "",
        _row(
            [f"group (best {tuned})", "trainable", "mean [95% interval] (seeds)", f"against {ref_group.label or ref}"]
        ),
        _row(["---"] * 4),
    ]
    for g_name, g in groups.items():
        if g_name == ref:
            vs = "reference"
        elif g_name in comps:
            edge = bool(g.best_at_edge or ref_group.best_at_edge)
            vs = comparison_text(comps[g_name], seed_count(g), seed_count(ref_group), d, edge)
        else:
            vs = "no comparison"
        lines.append(
            _row([f"{g.label or g_name} ({best_text(g)})", range_text(g.trainable, "none"), mean_text(g, d), vs])
        )
    for key, metric in (exp.secondary or {}).items():
        metric = SecondaryMetric.of(metric)
        lines += ["", f"Secondary metric {key} (its own family of {metric.family_size} tests):", ""]
        lines += [
            _row(["group", "mean [95% interval] (seeds)", f"against {ref_group.label or ref}"]),
            _row(["---"] * 3),
        ]
        m_groups, m_comps = metric.groups or {}, metric.comparisons or {}
        for g_name, g in m_groups.items():
            label = Group.of(groups.get(g_name) or {}).label or g_name
            vs = (
                "reference"
                if g_name == ref
                else comparison_text(m_comps.get(g_name) or Comparison(), seed_count(g), 0, 2, False)
            )
            lines.append(_row([label, mean_text(g, 2), vs]))
    return lines


def claims_markdown(claims: list[Claim | dict], level: str = "###") -> list[str]:
    if not claims:
        return []
    claims = [Claim.of(c) for c in claims]
    lines = [f"{level} Claims", "", _row(["paper", "claim", "experiment", "status", "why"]), _row(["---"] * 5)]
    for c in claims:
        lines.append(_row([c.paper, c.claim, c.experiment, f"**{c.status}**", c.why]))
    rules = {c.rule_id: (c.paper, c.rule) for c in claims if c.rule}
    if rules:
        lines += ["", "Rules:", ""] + [f"- {paper} ({key}): {rule}" for key, (paper, rule) in rules.items()]
    return lines


def interactions_markdown(interactions: dict, level: str = "###") -> list[str]:
    """`interactions`: {experiment: {group: Interaction (or its JSON object)}}."""
    lines = []
    for name, found in interactions.items():
        if not found:
            continue
        found = {group: Interaction.of(i) for group, i in found.items()}
        first = next(iter(found.values()))
        levels = first.levels
        lines += [f"{level} {name}: interactions with {first.factor}", ""]
        lines += [
            _row(["group", f"difference at {' / '.join(map(str, levels))}", "interaction [family interval]", "verdict"])
        ]
        lines += [_row(["---"] * 4)]
        for group, i in found.items():
            d = " / ".join("—" if x is None else f"{x:+.3f}" for x in i.difference or [])
            ci = i.ci_family
            inter = (
                "untested"
                if i.interaction is None
                else f"{i.interaction:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
            )
            lines.append(_row([group, d, inter, f"**{i.verdict}**"]))
        lines.append("")
    return lines


def summary_markdown(verdicts: VerdictsFile | dict, level: str = "###") -> str:
    """Every experiment's verdict table, the interactions of its factors, then the claims with their rules."""
    verdicts = VerdictsFile.of(verdicts)
    lines: list[str] = []
    for name, exp in (verdicts.experiments or {}).items():
        lines += experiment_markdown(name, exp, level) + [""]
    lines += interactions_markdown(verdicts.interactions or {}, level)
    lines += claims_markdown(verdicts.claims or [], level)
    return "\n".join(lines).rstrip() + "\n"


def splice(text: str, path: str, summary: str) -> str:
    """`text` with the block between BEGIN (naming `path`) and END replaced by `summary`; ValueError without one."""
    begin = BEGIN.format(path=path)
    start = text.find(begin)
    end = text.find(END, start)
    if start < 0 or end < 0:
        raise ValueError(f"no block {begin} ... {END}")
    return text[: start + len(begin)] + "\n" + summary + text[end:]
