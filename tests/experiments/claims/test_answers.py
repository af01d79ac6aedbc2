"""The claims of the answers to Xiong et al. (warm-up-free blocks, the pointwise norms, gated attention), each rule
on hand-made verdicts whose answer is known."""

import pytest

from blocklab.experiments.claims.answers import GATE_RANGE, GATE_SINK, RULES
from tests.experiments.claims.helpers import comparison, experiment, group, judge_one

ADMIN = next(r for r in RULES if r.key == "warmup-free-admin")
DERF = next(r for r in RULES if r.key == "norm-free-derf")


def arms(a0=None, a=None, post0=None, pre0=None, contrast=None):
    groups = {
        "a0": group("Admin, no warm-up", facts={"kind": "admin", "warmup": False}, trainable=[1e-4, 1e-2]),
        "a": group("Admin", facts={"kind": "admin", "warmup": True}),
        "post0": group("Post-LN, no warm-up", facts={"kind": "post-ln", "warmup": False}, trainable=[1e-4, 1e-3]),
        "pre0": group("Pre-LN, no warm-up", facts={"kind": "pre-ln", "warmup": False}, trainable=[1e-4, 1e-2]),
        "pre": group("Pre-LN", facts={"kind": "pre-ln", "warmup": True}),
    }
    for k, fields in (("a0", a0), ("a", a), ("post0", post0), ("pre0", pre0)):
        groups[k] |= fields or {}
    comps = {k: comparison() for k in groups if k != "pre"}
    return experiment(groups, comps, {"a0 vs a": comparison(**(contrast or {}))})


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "holds"),  # as high as Pre-LN, equivalent to its warm-up runs
        ({"a0": {"trainable": [1e-4, 3e-2]}, "contrast": {"verdict": "better", "difference": -0.1}}, "holds"),
        ({"a0": {"trainable": [1e-4, 1e-3]}}, "does not hold"),  # no higher than Post-LN without warm-up
        ({"a0": {"trainable": None}}, "does not hold"),
        ({"contrast": {"difference": 0.3, "ci": (0.2, 0.4), "verdict": "worse"}}, "does not hold"),
        ({"contrast": {"difference": 0.05, "ci": (-0.05, 0.15), "verdict": "unresolved"}}, "inconclusive"),
        ({"a0": {"trainable": [1e-4, 3e-3]}}, "inconclusive"),  # between Post-LN's and Pre-LN's
        ({"post0": {"trainable": [1e-4, 1e-2]}}, "inconclusive"),  # Post-LN trained: no problem to remove
        ({"a0": {"best_at_edge": True}}, "inconclusive"),
        ({"contrast": {"verdict": "fails", "ci": None}}, "does not hold"),
    ],
)
def test_warmup_free_rule(kwargs, status):
    exp = arms(**kwargs)
    (binding,) = ADMIN.find(exp)
    assert ADMIN.pairs(binding) == [("a0", "a")]
    ((claim, got, why),) = judge_one(ADMIN, exp)
    assert got == status, why
    assert claim.startswith("Admin trains without warm-up") and "Post-LN, no warm-up" in why


def norm_free(comp):
    groups = {
        "pre": group("Pre-LN", facts={"kind": "pre-ln", "warmup": True}),
        "derf": group("Pre-LN + Derf", facts={"kind": "derf", "warmup": True}),
        "derf0": group("Pre-LN + Derf, no warm-up", facts={"kind": "derf", "warmup": False}),
    }
    return experiment(groups, {"derf": comparison(**comp), "derf0": comparison()})


@pytest.mark.parametrize(
    "comp, status",
    [
        ({"ci": (-0.05, 0.05)}, "holds"),
        ({"ci": (-0.3, 0.3), "verdict": "unresolved"}, "inconclusive"),
        ({"difference": 0.4, "ci": (0.3, 0.5), "verdict": "worse"}, "does not hold"),
        ({"ci": None, "verdict": "one seed"}, "inconclusive"),
    ],
)
def test_norm_free_rule_reads_the_group_in_the_references_arm(comp, status):
    found = judge_one(DERF, norm_free(comp))
    assert len(found) == 1 and found[0][1] == status, found


def gates(g_top, g0_top):
    groups = {
        "pre": group("Pre-LN", facts={"kind": "pre-ln", "warmup": True}),
        "pre0": group("Pre-LN, no warm-up", facts={"kind": "pre-ln", "warmup": False}),
        "g": group("gate", facts={"kind": "gate", "warmup": True}, trainable=[1e-4, g_top]),
        "g0": group("gate, no warm-up", facts={"kind": "gate", "warmup": False}, trainable=[1e-4, g0_top]),
    }
    return experiment(groups, {k: comparison() for k in ("pre0", "g", "g0")})


@pytest.mark.parametrize(
    "tops, status", [((3e-2, 1e-2), "holds"), ((1e-2, 1e-2), "inconclusive"), ((3e-2, 3e-3), "does not hold")]
)
def test_gate_range_rule(tops, status):
    ((_, got, why),) = judge_one(GATE_RANGE, gates(*tops))
    assert got == status, why


def with_mass(exp, gate, pre, uniform=0.2):
    exp["groups"]["g"]["measures"] = {
        "first_token_mass": {"seeds": [0, 1, 2, 3, 4], "values": gate, "uniform": uniform}
    }
    exp["groups"]["pre"]["measures"] = {
        "first_token_mass": {"seeds": [0, 1, 2, 3, 4], "values": pre, "uniform": uniform}
    }
    return exp


@pytest.mark.parametrize(
    "gate, pre, status",
    [
        ([0.30, 0.31, 0.32, 0.30, 0.31], [0.60, 0.62, 0.61, 0.63, 0.60], "holds"),
        ([0.60, 0.62, 0.61, 0.63, 0.60], [0.30, 0.31, 0.32, 0.30, 0.31], "does not hold"),
        ([0.30, 0.70, 0.50, 0.40, 0.60], [0.52, 0.48, 0.55, 0.50, 0.51], "inconclusive"),
        ([0.20, 0.21, 0.20, 0.21, 0.20], [0.22, 0.23, 0.22, 0.21, 0.22], "inconclusive"),  # no sink formed
    ],
)
def test_sink_rule_pairs_the_first_token_mass_by_seed(gate, pre, status):
    ((_, got, why),) = judge_one(GATE_SINK, with_mass(gates(3e-2, 1e-2), gate, pre))
    assert got == status, why
    bare = judge_one(GATE_SINK, gates(3e-2, 1e-2))
    assert bare[0][1] == "inconclusive" and "fewer than two" in bare[0][2]
