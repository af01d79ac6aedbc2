"""The later answers' claims: OLMo 2's range, MUDDFormer's compute multiplier, Canon's gain, NormFormer's speed."""

import pytest

from blocklab.experiments.claims.stream import RULES as STREAM_RULES
from blocklab.experiments.claims.successors import CANON_GAIN, MUDD_COMPUTE, OLMO2_RANGE
from tests.experiments.claims.helpers import comparison, experiment, group, judge_one

NORMFORMER = next(r for r in STREAM_RULES if r.key == "speedup-normformer")


def two(block, fields=None, comp=None, **exp):
    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln"}),
        "g": group(block, facts={"block": block} | (fields or {})),
    }
    return experiment(groups, {"g": comparison(**(comp or {}))}) | exp


@pytest.mark.parametrize("top, status", [(3e-2, "holds"), (1e-2, "inconclusive"), (3e-3, "does not hold")])
def test_olmo2_range_against_pre_ln(top, status):
    exp = two("olmo2")
    exp["groups"]["g"]["trainable"] = [1e-3, top]
    ((_, got, why),) = judge_one(OLMO2_RANGE, exp)
    assert got == status, why


@pytest.mark.parametrize(
    "multiplier, ci, status",
    [
        (2.4, [1.9, 3.1], "holds"),
        (1.2, [0.9, 1.6], "does not hold"),
        (2.0, [1.1, 3.0], "inconclusive"),
        (None, None, "inconclusive"),
    ],
)
def test_muddformer_compute_multiplier_is_bound_by_its_factor(multiplier, ci, status):
    exp = two("muddformer", sizes=[{}, {}], frontier={"g": {"multiplier": multiplier, "multiplier_ci95": ci}})
    ((_, got, why),) = judge_one(MUDD_COMPUTE, exp)
    assert got == status, why
    assert judge_one(MUDD_COMPUTE, two("muddformer")) == []  # no sizes: no frontier to read


@pytest.mark.parametrize(
    "comp, status",
    [
        ({"difference": -0.2, "ci": (-0.3, -0.1), "verdict": "better"}, "holds"),
        ({"difference": 0.2, "ci": (0.1, 0.3), "verdict": "worse"}, "does not hold"),
        ({"difference": -0.02, "ci": (-0.06, 0.03), "verdict": "equivalent"}, "inconclusive"),
        ({"verdict": "fails", "ci": None}, "does not hold"),
    ],
)
def test_canon_against_the_same_block_without_it(comp, status):
    exp = two("pre-ln", {"canon": "ABCD"}, comp)
    ((claim, got, why),) = judge_one(CANON_GAIN, exp)
    assert got == status and "(ABCD)" in claim, why


def test_normformer_speed_claim_reads_the_steps_to_pre_lns_loss():
    exp = two("normformer")
    for name, steps in (("pre", [300, 290, 310, 305, 295]), ("g", [200, 195, 205, 210, 198])):
        exp["groups"][name]["measures"] = {
            "steps_to_reference": {"level": 4.0, "seeds": [0, 1, 2, 3, 4], "values": steps}
        }
    ((claim, got, why),) = judge_one(NORMFORMER, exp)
    assert got == "holds" and "22-43% faster" in claim, why  # about 1.5x on every seed, above 1.22
