"""The papers' claims as rules of one kind (claims/base.py), judged from verdicts.json alone."""

from __future__ import annotations

from blocklab.experiments.claims import answers, optimizers, papers, stream, successors
from blocklab.experiments.claims.base import Context, Rule, under_muon

RULES: list[Rule] = [
    papers.HE_PER_STEP,
    papers.XIONG_WARMUP,
    *answers.RULES,
    *stream.RULES,
    *successors.RULES,
    *optimizers.RULES,
]


def _bindings(experiments: dict) -> list[tuple[Rule, str, dict]]:
    """Every (rule, experiment, binding): a rule asked under Muon in the experiments trained with it, the others
    in the rest."""
    return [
        (rule, name, b)
        for name, exp in experiments.items()
        for rule in RULES
        if rule.muon == under_muon(exp)
        for b in rule.find(exp)
    ]


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
