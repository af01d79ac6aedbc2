"""The papers' claims as rules of one kind (claims/base.py), judged from verdicts.json alone."""

from __future__ import annotations

from blocklab.experiments.claims import answers, papers, stream, successors
from blocklab.experiments.claims.base import Context, Rule

RULES: list[Rule] = [papers.HE_PER_STEP, papers.XIONG_WARMUP, *answers.RULES, *stream.RULES, *successors.RULES]


def _bindings(experiments: dict) -> list[tuple[Rule, str, dict]]:
    return [(rule, name, b) for name, exp in experiments.items() for rule in RULES for b in rule.find(exp)]


def claim_pairs(experiments: dict) -> list[tuple[str, str, str]]:
    """(experiment, group, against) for every comparison a claim reads: each joins the family of its metric."""
    return [(name, a, b) for rule, name, binding in _bindings(experiments) for a, b in rule.pairs(binding)]


def judge_claims(experiments: dict) -> list[dict]:
    """Every claim that applies to the sweep's experiments, each with its rule, status and why."""
    found = _bindings(experiments)
    sizes: dict[str, int] = {}
    for rule, _, _ in found:
        if rule.measure:
            sizes[rule.measure] = sizes.get(rule.measure, 0) + 1
    out = []
    for rule, name, binding in found:
        ctx = Context(name, experiments[name], sizes.get(rule.measure, 1))
        claim, status, why = rule.judge(ctx, binding)
        group = binding.get("group") or binding.get("a0") or binding.get("post0") or next(iter(binding.values()))
        out.append(
            {
                "paper": rule.paper,
                "claim": claim,
                "experiment": name,
                "group": group if isinstance(group, str) else group[0],
                "rule": rule.statement,
                "rule_id": rule.key,
                "status": status,
                "why": why,
            }
        )
    return out
