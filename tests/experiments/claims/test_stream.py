"""The residual-stream papers' claims: speed-ups in steps bound by their factor, Hyper-Connections' gain beside
mHC's construction check, ResFormer's smaller model against Pre-LN."""

import math

import pytest

from blocklab.experiments.claims.stream import HC_GAIN, RESFORMER_PARAMS, RULES
from tests.experiments.claims.helpers import comparison, experiment, group, judge_one

HC_SPEEDUP = next(r for r in RULES if r.key == "speedup-hyper-connections")


def speedup_exp(ref_steps, hc_steps, hc=None):
    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln"}),
        "hc": group("HC", facts={"block": "hyper-connections"}, **(hc or {})),
    }
    for name, steps in (("pre", ref_steps), ("hc", hc_steps)):
        groups[name]["measures"] = {"steps_to_reference": {"level": 4.0, "seeds": [0, 1, 2, 3, 4], "values": steps}}
    return experiment(groups, {"hc": comparison()})


@pytest.mark.parametrize(
    "hc_steps, status",
    [
        ([100, 105, 98, 102, 100], "holds"),  # about 2.7x on every seed: the interval's low end above 1.8
        ([200, 210, 190, 205, 200], "does not hold"),  # about 1.35x: the high end below 1.8
        ([100, 250, 130, 240, 150], "inconclusive"),  # too spread to say
    ],
)
def test_speedup_is_bound_by_its_factor_not_by_one(hc_steps, status):
    ref = [270, 275, 272, 280, 271]
    ((_, got, why),) = judge_one(HC_SPEEDUP, speedup_exp(ref, hc_steps))
    assert got == status, why
    ups = [r / s for r, s in zip(ref, hc_steps)]
    assert ", ".join(f"{u:.2f}x" for u in ups) in why
    geo = math.exp(sum(math.log(u) for u in ups) / len(ups))
    assert f"geometric mean {geo:.2f}x" in why


def test_a_speedup_of_a_block_that_fails_does_not_hold():
    exp = speedup_exp([270] * 5, [100] * 5, {"statuses": ["diverged"] * 5, "failed": 5})
    exp["comparisons"]["hc"] = comparison(verdict="fails", ci=None)
    assert judge_one(HC_SPEEDUP, exp)[0][1] == "does not hold"


def gain_exp(hc, mhc):
    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln"}),
        "hc": group("HC", facts={"block": "hyper-connections"}),
        "mhc": group("mHC", facts={"block": "mhc"}),
    }
    for name, v in (("hc", hc), ("mhc", mhc)):
        groups[name]["measures"] = {"largest_gain": {"seeds": list(range(len(v))), "values": v}}
    return experiment(groups, {"hc": comparison(), "mhc": comparison()})


@pytest.mark.parametrize(
    "hc, mhc, status, said",
    [
        ([40.0, 55.0, 38.0, 60.0, 45.0], [1.0, 1.0, 1.0, 1.0, 1.0], "holds", "within"),
        ([1.1, 1.2, 1.15, 1.1, 1.2], [1.0, 1.0, 1.0, 1.0, 1.0], "does not hold", "within"),  # HC's did not grow
        ([1.5, 8.0, 2.5, 30.0, 1.2], [1.0, 1.0, 1.0, 1.0, 1.0], "inconclusive", "within"),
        ([40.0, 55.0, 38.0, 60.0, 45.0], [1.0, 2.5, 1.0, 1.0, 1.0], "does not hold", "NOT within"),  # broken mHC
    ],
)
def test_the_gain_claim_tests_hyper_connections_and_checks_mhcs_construction(hc, mhc, status, said):
    ((_, got, why),) = judge_one(HC_GAIN, gain_exp(hc, mhc))
    assert got == status, why
    assert f"a check of its doubly stochastic construction: {said} the bound" in why


def test_resformer_with_fewer_parameters_is_judged_by_non_inferiority():
    groups = {
        "pre": group("Pre-LN", facts={"block": "pre-ln"}),
        "res": group("ResFormer", facts={"block": "value-residual"}),
        "small": group("ResFormer small", facts={"block": "value-residual"}, n_params=839),
    }
    exp = experiment(groups, {"res": comparison(), "small": comparison(ci=(-0.02, 0.06))})
    found = judge_one(RESFORMER_PARAMS, exp)
    assert len(found) == 1  # only the one with fewer parameters
    claim, status, why = found[0]
    assert status == "holds" and "16.1% fewer parameters" in claim and "839 parameters against 1,000" in why
