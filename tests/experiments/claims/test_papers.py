"""He & Hofmann's per-step claim and Xiong et al.'s warm-up claim, each rule on hand-made verdicts."""

import pytest

from blocklab.experiments.claims.papers import HE_PER_STEP, XIONG_WARMUP
from tests.experiments.claims.helpers import comparison, experiment, group, judge_one


def he(sas=None, pre=None, comp=None):
    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln", "family": "classic"}, **(pre or {})),
        "sas": group("SAS-P", facts={"block": "sas-p", "family": "simplified"}, **({"n_params": 900} | (sas or {}))),
        "par": group("Parallel", facts={"block": "parallel", "family": "classic"}),
    }
    return experiment(groups, {"sas": comparison(**(comp or {})), "par": comparison()})


@pytest.mark.parametrize(
    "comp, sas, pre, status",
    [
        ({"ci": (-0.3, 0.05)}, {}, {}, "holds"),  # the family interval ends below +margin
        ({"difference": 0.3, "ci": (0.2, 0.4), "verdict": "worse"}, {}, {}, "does not hold"),  # starts above it
        ({"difference": 0.08, "ci": (0.0, 0.16), "verdict": "unresolved"}, {}, {}, "inconclusive"),
        ({"ci": (-0.3, 0.05), "verdict": "fails more often", "failures": (3, 5, 0, 5)}, {}, {}, "does not hold"),
        ({"verdict": "fails", "ci": None, "failures": (5, 5, 0, 5)}, {"failed": 5}, {}, "does not hold"),
        ({"ci": (-0.3, 0.05), "verdict": "at edge"}, {"best_at_edge": True}, {}, "inconclusive"),
        ({"ci": (-0.3, 0.05)}, {"n_params": 1000}, {}, "holds"),  # no fewer parameters: the speed alone is claimed
        ({"ci": None, "verdict": "one seed"}, {}, {}, "inconclusive"),
    ],
)
def test_he_per_step_rule(comp, sas, pre, status):
    found = judge_one(HE_PER_STEP, he(sas, pre, comp))
    assert len(found) == 1  # the simplified block only; Parallel is classic
    claim, got, why = found[0]
    assert got == status, why
    fewer = sas.get("n_params", 900) < 1000
    assert claim == "SAS-P trains as fast per step as Pre-LN" + (", with fewer parameters" if fewer else "")
    assert "900 parameters against 1,000 (-10%)" in why or not fewer


def test_he_needs_pre_ln_as_the_reference():
    exp = he()
    exp["groups"]["pre"]["facts"]["block"] = "post-ln"
    assert judge_one(HE_PER_STEP, exp) == []


def xiong(post0=(1e-4, 1e-3), post=(1e-4, 1e-2), pre0=(1e-4, 1e-2), comp=None, edge=False):
    groups = {
        "post0": group("Post-LN, no warm-up", facts={"block": "post-ln", "kind": "post-ln", "warmup": False}),
        "post": group("Post-LN", facts={"block": "post-ln", "kind": "post-ln", "warmup": True}),
        "pre0": group("Pre-LN, no warm-up", facts={"block": "pre-ln", "kind": "pre-ln", "warmup": False}),
        "pre": group("Pre-LN", facts={"block": "pre-ln", "kind": "pre-ln", "warmup": True}),
    }
    for k, r in (("post0", post0), ("post", post), ("pre0", pre0)):
        groups[k]["trainable"] = list(r) if r else None
    groups["pre"]["best_at_edge"] = edge
    comps = {k: comparison() for k in ("post0", "post")} | {"pre0": comparison(**(comp or {}))}
    return experiment(groups, comps)


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "holds"),
        ({"post0": (1e-4, 1e-2)}, "does not hold"),  # Post-LN without warm-up as high as with it
        ({"post0": None, "post": None}, "does not hold"),  # warm-up rescued nothing: neither trains
        ({"comp": {"difference": 0.05, "ci": (-0.1, 0.2), "verdict": "unresolved"}}, "inconclusive"),
        ({"comp": {"difference": 0.3, "ci": (0.2, 0.4), "verdict": "worse"}}, "does not hold"),  # by more than margin
        ({"comp": {"difference": 0.12, "ci": (0.01, 0.2), "verdict": "worse"}}, "inconclusive"),  # worse, not by it
        ({"comp": {"verdict": "fails", "ci": None}}, "does not hold"),
        ({"edge": True}, "inconclusive"),
    ],
)
def test_xiong_warmup_rule(kwargs, status):
    exp = xiong(**kwargs)
    assert XIONG_WARMUP.pairs(XIONG_WARMUP.find(exp)[0]) == [("pre0", "pre")]
    ((claim, got, why),) = judge_one(XIONG_WARMUP, exp)
    assert got == status, why
    assert "Post-LN, no warm-up 0.0001..0.001" in why or kwargs.get("post0", 1) != (1e-4, 1e-3)


def test_xiong_reads_a_contrast_when_the_reference_is_another_group():
    exp = xiong()
    exp["reference"] = "post"
    exp["contrasts"] = {"pre0 vs pre": comparison(verdict="better", difference=-0.2, ci=(-0.3, -0.1))}
    ((_, status, why),) = judge_one(XIONG_WARMUP, exp)
    assert status == "holds" and "-0.200" in why
