"""The claims asked again under Muon (claims/optimizers.py), each rule on hand-made verdicts, and the mechanism
that asks a paper's rule under its own optimizer only."""

import pytest

from blocklab.experiments.claims import judge_claims
from blocklab.experiments.claims.optimizers import HE_PER_STEP_MUON, XIONG_WARMUP_MUON
from blocklab.experiments.claims.papers import HE_PER_STEP
from tests.experiments.claims.helpers import comparison, experiment, group, judge_one


def he(optimizer="muon", comp=None):
    facts = {"optimizer": optimizer}
    groups = {
        "pre": group(f"Pre-LN, {optimizer}", facts=facts | {"block": "pre-ln", "kind": "pre-ln", "family": "classic"}),
        "sas": group(f"SAS-P, {optimizer}", facts=facts | {"block": "sas-p", "family": "simplified"}, n_params=900),
    }
    return experiment(groups, {"sas": comparison(**(comp or {}))})


@pytest.mark.parametrize(
    "comp, status",
    [
        ({"ci": (-0.3, 0.05)}, "holds"),
        ({"difference": 0.3, "ci": (0.2, 0.4), "verdict": "worse"}, "does not hold"),
        ({"difference": 0.08, "ci": (0.0, 0.16), "verdict": "unresolved"}, "inconclusive"),
        ({"verdict": "fails", "ci": None, "failures": (5, 5, 0, 5)}, "does not hold"),
    ],
)
def test_he_per_step_under_muon_is_he_and_hofmanns_rule_said_of_muon(comp, status):
    ((claim, got, why),) = judge_one(HE_PER_STEP_MUON, he(comp=comp))
    assert got == status, why
    assert claim == "Under Muon, SAS-P trains as fast per step as Pre-LN, with fewer parameters"
    assert judge_one(HE_PER_STEP, he(comp=comp))[0][1:] == (got, why)  # the same evidence, the same word


def xiong(post0=(1e-3, 1e-2), post=(1e-3, 3e-2), edge=False, curve=(1e-3, 3e-3, 1e-2, 3e-2)):
    def g(label, warmup, r):
        facts = {"block": "post-ln", "kind": "post-ln", "warmup": warmup, "optimizer": "muon"}
        return group(label, facts=facts, trainable=list(r) if r else None, curve=[{"value": v} for v in curve])

    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln", "kind": "pre-ln", "warmup": True, "optimizer": "muon"}),
        "post0": g("Post-LN, no warm-up", False, post0),
        "post": g("Post-LN", True, post),
    }
    groups["post"]["best_at_edge"] = edge
    return experiment(groups, {k: comparison() for k in ("post0", "post")})


@pytest.mark.parametrize(
    "kwargs, status, words",
    [
        ({}, "holds", "ends lower"),
        ({"post0": None}, "holds", "ends lower"),  # no range without warm-up: the lowest
        ({"post0": (1e-3, 3e-2), "post": (1e-3, 1e-2)}, "does not hold", "ends higher"),
        ({"post0": (1e-3, 1e-2), "post": (1e-3, 1e-2)}, "does not hold", "same rate"),
        ({"post0": None, "post": None}, "does not hold", "rescued nothing"),
        ({"post0": (1e-3, 3e-2), "post": (1e-3, 3e-2)}, "inconclusive", "grid's largest rate"),
        ({"post0": (1e-3, 1e-1), "post": (1e-3, 1e-1), "curve": (1e-3, 3e-2, 1e-1)}, "inconclusive", "largest"),
        ({"edge": True}, "inconclusive", "grid's edge"),
    ],
)
def test_xiong_warmup_under_muon_reads_where_each_trainable_range_ends(kwargs, status, words):
    ((claim, got, why),) = judge_one(XIONG_WARMUP_MUON, xiong(**kwargs))
    assert got == status and words in why, why
    assert claim.startswith("Under Muon, without warm-up Post-LN's usable learning rates")


def test_a_papers_rule_is_asked_under_its_own_optimizer_and_the_muon_rules_under_muon():
    adamw, muon, old = he("adamw"), he("muon"), he(None)  # old: a verdicts.json from before facts named it
    for exp in (adamw, muon, old):
        exp["groups"] |= xiong()["groups"] | {"pre": exp["groups"]["pre"]}
        for name in ("post0", "post"):
            exp["groups"][name]["facts"]["optimizer"] = exp["groups"]["pre"]["facts"]["optimizer"]
            exp["comparisons"][name] = comparison()
    found = judge_claims({"a": adamw, "m": muon, "o": old})
    assert [(c["experiment"], c["rule_id"]) for c in found] == [
        ("a", "he-per-step"),
        ("m", "he-per-step-muon"),
        ("m", "xiong-warmup-muon"),
        ("o", "he-per-step"),
    ]
