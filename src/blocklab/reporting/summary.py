"""`blocklab report DIR --summary`: the verdict tables and the claims of DIR/verdicts.json as markdown, for any text
that states a result (a results folder's README, the README's demo section). Prose around it may interpret;
the numbers and words come from here, so they cannot drift from the file."""

from __future__ import annotations

from blocklab.reporting.sensitivity import finite, short_key
from blocklab.reporting.verdict_words import best_text, comparison_text, decimals, mean_text, range_text, seed_count

BEGIN = "<!-- blocklab summary: {path} -->"
END = "<!-- end of blocklab summary -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(cells) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def experiment_markdown(name: str, exp: dict, level: str = "###") -> list[str]:
    groups, comps = exp.get("groups") or {}, exp.get("comparisons") or {}
    ref = exp.get("reference")
    ref_group = groups.get(ref) or {}
    d = decimals(exp)
    tuned = short_key(exp.get("tuned") or "value")
    cap = exp.get("cap")
    lines = [
        f"{level} {exp.get('title') or name}",
        "",
        f"Reference: {ref_group.get('label') or ref}. Score: {str(exp.get('metric')).replace('_', ' ')} "
        f"({'lower' if exp.get('lower_is_better', True) else 'higher'} is better)"
        + (f"; cap {cap:.3f} (the unigram model's)" if finite(cap) else "")
        + f"; tolerance {exp.get('tolerance')}; margin {exp.get('margin')}; family of {exp.get('family_size')} "
        f"tests (each word at level 0.05/{max(1, exp.get('family_size') or 1)}); tuning seeds "
        f"{', '.join(map(str, exp.get('tuning_seeds') or [])) or 'none'}.",
        "",
        _row(
            [
                f"group (best {tuned})",
                "trainable",
                "mean [95% interval] (seeds)",
                f"against {ref_group.get('label') or ref}",
            ]
        ),
        _row(["---"] * 4),
    ]
    for g_name, g in groups.items():
        if g_name == ref:
            vs = "reference"
        elif g_name in comps:
            edge = bool(g.get("best_at_edge") or ref_group.get("best_at_edge"))
            vs = comparison_text(comps[g_name], seed_count(g), seed_count(ref_group), d, edge)
        else:
            vs = "no comparison"
        lines.append(
            _row(
                [
                    f"{g.get('label') or g_name} ({best_text(g)})",
                    range_text(g.get("trainable"), "none"),
                    mean_text(g, d),
                    vs,
                ]
            )
        )
    for key, metric in (exp.get("secondary") or {}).items():
        lines += ["", f"Secondary metric {key} (its own family of {metric.get('family_size')} tests):", ""]
        lines += [
            _row(["group", "mean [95% interval] (seeds)", f"against {ref_group.get('label') or ref}"]),
            _row(["---"] * 3),
        ]
        m_groups, m_comps = metric.get("groups") or {}, metric.get("comparisons") or {}
        for g_name, g in m_groups.items():
            label = (groups.get(g_name) or {}).get("label") or g_name
            vs = (
                "reference" if g_name == ref else comparison_text(m_comps.get(g_name) or {}, seed_count(g), 0, 2, False)
            )
            lines.append(_row([label, mean_text(g, 2), vs]))
    return lines


def claims_markdown(claims: list[dict], level: str = "###") -> list[str]:
    if not claims:
        return []
    lines = [f"{level} Claims", "", _row(["paper", "claim", "experiment", "status", "why"]), _row(["---"] * 5)]
    for c in claims:
        lines.append(
            _row([c.get("paper"), c.get("claim"), c.get("experiment"), f"**{c.get('status')}**", c.get("why")])
        )
    rules = {c.get("rule_id"): (c.get("paper"), c.get("rule")) for c in claims if c.get("rule")}
    if rules:
        lines += ["", "Rules:", ""] + [f"- {paper} ({key}): {rule}" for key, (paper, rule) in rules.items()]
    return lines


def interactions_markdown(interactions: dict, level: str = "###") -> list[str]:
    lines = []
    for name, found in interactions.items():
        if not found:
            continue
        levels = next(iter(found.values()))["levels"]
        lines += [f"{level} {name}: interactions with {next(iter(found.values()))['factor']}", ""]
        lines += [
            _row(["group", f"difference at {' / '.join(map(str, levels))}", "interaction [family interval]", "verdict"])
        ]
        lines += [_row(["---"] * 4)]
        for group, i in found.items():
            d = " / ".join("—" if x is None else f"{x:+.3f}" for x in i.get("difference") or [])
            ci = i.get("ci_family")
            inter = (
                "untested"
                if i.get("interaction") is None
                else f"{i['interaction']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
            )
            lines.append(_row([group, d, inter, f"**{i.get('verdict')}**"]))
        lines.append("")
    return lines


def summary_markdown(verdicts: dict, level: str = "###") -> str:
    """Every experiment's verdict table, the interactions of its factors, then the claims with their rules."""
    lines: list[str] = []
    for name, exp in (verdicts.get("experiments") or {}).items():
        lines += experiment_markdown(name, exp, level) + [""]
    lines += interactions_markdown(verdicts.get("interactions") or {}, level)
    lines += claims_markdown(verdicts.get("claims") or [], level)
    return "\n".join(lines).rstrip() + "\n"


def splice(text: str, path: str, summary: str) -> str:
    """`text` with the block between BEGIN (naming `path`) and END replaced by `summary`; ValueError without one."""
    begin = BEGIN.format(path=path)
    start = text.find(begin)
    end = text.find(END, start)
    if start < 0 or end < 0:
        raise ValueError(f"no block {begin} ... {END}")
    return text[: start + len(begin)] + "\n" + summary + text[end:]
