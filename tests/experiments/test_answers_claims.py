"""The claims of the answers to Xiong et al. (experiments/answers_claims.py): each rule on hand-made verdicts whose
answer is known, the sink rule on hand-made probe files, and every claim the warmup-answers preset asks for."""

import json
from types import SimpleNamespace

import pytest

from blocklab.experiments import answers_claims as ac
from blocklab.experiments.sweep import load_sweep
from blocklab.training.rundir import STREAM_PROBES


def result_with(groups, comparisons=None, reference="pre", cap=7.0, tolerance=0.1):
    base = {"label": "", "mean": 4.0, "best_at_edge": False, "trainable": [1e-3, 1e-2]}
    return {
        "tuned": "train.lr",
        "reference": reference,
        "cap": cap,
        "tolerance": tolerance,
        "groups": {n: base | {"label": n} | g for n, g in groups.items()},
        "comparisons": comparisons or {},
    }


XIONG = {"post0": {"trainable": [1e-4, 1e-3]}, "pre0": {"trainable": [1e-4, 1e-2]}}


@pytest.mark.parametrize(
    "a0, a, xiong, status",
    [
        ({"trainable": [1e-4, 1e-2], "mean": 4.05}, {}, {}, "holds"),  # Pre-LN's top, 0.05 from its warm-up score
        ({"trainable": [1e-4, 3e-2], "mean": 3.9}, {}, {}, "holds"),
        ({"trainable": [1e-4, 1e-3]}, {}, {}, "does not hold"),  # no higher than Post-LN without warm-up
        ({"trainable": None, "mean": 6.9}, {}, {}, "does not hold"),
        ({"trainable": [1e-4, 1e-2], "mean": 4.2}, {}, {}, "does not hold"),  # 0.2 worse than with warm-up
        ({"trainable": [1e-4, 3e-3]}, {}, {}, "inconclusive"),  # between Post-LN's and Pre-LN's
        ({}, {}, {"post0": {"trainable": [1e-4, 1e-2]}}, "inconclusive"),  # Post-LN trained: no problem here
        ({"best_at_edge": True}, {}, {}, "inconclusive"),
        ({}, {"mean": 7.0}, {}, "inconclusive"),  # its warm-up run failed (at the cap)
    ],
)
def test_warmup_free_rule(a0, a, xiong, status):
    groups = {"a0": a0, "a": a, **{k: XIONG[k] | xiong.get(k, {}) for k in XIONG}}
    claim = ac.warmup_free_claim("clm", result_with(groups), ("a0", "a"), "post0", "pre0", "admin")
    assert claim["status"] == status, claim["why"]
    assert claim["paper"] == "Liu et al. (2020)" and claim["group"] == "a0" and claim["experiment"] == "clm"
    assert "a0 " in claim["why"] and "post0 " in claim["why"]


@pytest.mark.parametrize(
    "comparison, status",
    [
        ({"difference": 0.0, "ci95": [-0.05, 0.05], "p_holm": 0.9, "verdict": "indistinguishable"}, "holds"),
        ({"difference": 0.0, "ci95": [-0.3, 0.3], "p_holm": 0.9, "verdict": "indistinguishable"}, "inconclusive"),
        ({"difference": 0.4, "ci95": [0.3, 0.5], "p_holm": 0.01, "verdict": "worse"}, "does not hold"),
        ({"verdict": "one seed"}, "inconclusive"),
    ],
)
def test_norm_free_rule(comparison, status):
    result = result_with({"derf": {}, "pre": {}}, {"derf": comparison})
    claim = ac.norm_free_claim("clm", result, "derf", "pre", "derf")
    assert claim["status"] == status and claim["paper"] == "Chen et al. (2025)"


@pytest.mark.parametrize(
    "gate_tops, status",
    [
        ((3e-2, 1e-2), "holds"),  # higher with warm-up, as high without
        ((1e-2, 1e-2), "inconclusive"),  # as high in both arms
        ((3e-2, 3e-3), "does not hold"),  # lower without warm-up
    ],
)
def test_gate_range_rule(gate_tops, status):
    groups = {"g": {"trainable": [1e-4, gate_tops[0]]}, "g0": {"trainable": [1e-4, gate_tops[1]]}}
    groups |= {"pre": {}, "pre0": {}}
    claim = ac.gate_range_claim("clm", result_with(groups), ["g", "g0"], ["pre", "pre0"])
    assert claim["status"] == status, claim["why"]


def write_sink(run, layers, uniform=0.2):
    run.mkdir(parents=True)
    (run / STREAM_PROBES).write_text(
        json.dumps({"final": {"attention": {"first_token_mass": layers, "uniform": uniform}}})
    )
    return run


@pytest.mark.parametrize(
    "gate, pre, status",
    [
        ([0.30, 0.31, 0.32], [0.60, 0.62, 0.61], "holds"),
        ([0.60, 0.62, 0.61], [0.30, 0.31, 0.32], "does not hold"),
        ([0.30, 0.50, 0.70], [0.40, 0.52, 0.61], "inconclusive"),  # no significant difference
        ([0.20, 0.21, 0.20], [0.22, 0.23, 0.22], "inconclusive"),  # Pre-LN within 0.05 of the even 0.2: no sink
    ],
)
def test_sink_rule_reads_the_mean_over_layers_and_heads(tmp_path, gate, pre, status):
    # each seed's two layers of two heads average to the value given
    runs = {
        n: [write_sink(tmp_path / f"{n}{i}", [[v - 0.1, v + 0.1], [v, v]]) for i, v in enumerate(vals)]
        for n, vals in (("g", gate), ("pre", pre))
    }
    assert ac.sink_mass(runs["g"][0]) == pytest.approx((gate[0], 0.2))
    claim = ac.gate_sink_claim("clm", result_with({"g": {}, "pre": {}}), "g", "pre", runs)
    assert claim["status"] == status, claim["why"]
    one = ac.gate_sink_claim("clm", result_with({"g": {}, "pre": {}}), "g", "pre", {"g": runs["g"][:1], "pre": []})
    assert one["status"] == "inconclusive" and "fewer than two" in one["why"]


def test_the_preset_asks_every_claim_of_both_experiments(tmp_path):
    """clm: four warm-up-free blocks, Derf and DyT, the gate's range and its sink; translation: Admin, T-Fixup and
    ResiDual. Every group resolved from the preset's own settings (block, norm, gate, warm-up)."""
    sweep = load_sweep("warmup-answers")
    experiments = {}
    for exp in ("clm", "translation"):
        names = list(ac.arms(sweep, exp).values())
        experiments[exp] = result_with({n: {} for n in names}, reference=f"{exp}_pre-ln")
    assert ac.arms(sweep, "clm")[("gate", False)] == "clm_gate_wu0"
    assert ac.arms(sweep, "clm")[("derf", True)] == "clm_derf"
    finals = [SimpleNamespace(name=f"{g}_s{s}", group=g) for g in experiments["clm"]["groups"] for s in range(2)]
    claims = ac.answers_claims(experiments, sweep, tmp_path, finals)
    got = [(c["experiment"], c["paper"], c["group"]) for c in claims]
    assert got == [
        ("clm", "Liu et al. (2020)", "clm_admin_wu0"),
        ("clm", "Huang et al. (2020)", "clm_t-fixup_wu0"),
        ("clm", "Xie et al. (2023)", "clm_resi-dual_wu0"),
        ("clm", "Zhuo et al. (2025)", "clm_hybridnorm_wu0"),
        ("clm", "Chen et al. (2025)", "clm_derf"),
        ("clm", "Zhu et al. (2025)", "clm_dyt"),
        ("clm", "Qiu et al. (2025)", "clm_gate"),
        ("clm", "Qiu et al. (2025)", "clm_gate"),
        ("translation", "Liu et al. (2020)", "translation_admin_wu0"),
        ("translation", "Huang et al. (2020)", "translation_t-fixup_wu0"),
        ("translation", "Xie et al. (2023)", "translation_resi-dual_wu0"),
    ]
