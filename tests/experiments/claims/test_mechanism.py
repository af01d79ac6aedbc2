"""The claims as one mechanism: every rule states itself, and each preset asks the claims its groups are about,
found from the groups' facts alone (what verdicts.json stores)."""

import pytest

from blocklab.experiments.claims import RULES, claim_pairs, judge_claims
from blocklab.experiments.records import group_facts
from blocklab.experiments.sweep import load_sweep
from tests.experiments.claims.helpers import comparison, experiment, group


def test_every_rule_states_both_outcomes():
    keys = [r.key for r in RULES]
    assert len(keys) == len(set(keys))
    for r in RULES:
        text = r.statement.lower()
        assert "holds" in text and "does not hold" in text and "inconclusive" in text, r.key


def preset_experiments(name):
    """Each experiment of a preset as judged verdicts would hold it, with every group's facts from its config."""
    sweep = load_sweep(name)
    out = {}
    for exp_name, meta in (sweep.experiments or {None: {}}).items():
        groups = {}
        for g in [g for g in sweep.groups if g.experiment == exp_name]:
            tune = sweep.tune_of(g)
            config = sweep.make_run(g, sweep.size_indices()[-1], tune.values[0], 0, "final").config
            groups[g.name] = group(g.label, facts=group_facts(config), n_params=900 if "small" in g.name else 1000)
        ref = meta.get("target_run") or sweep.target_run or next(iter(groups))
        comps = {n: comparison() for n in groups if n != ref}
        out[exp_name or name] = experiment(groups, comps, reference=ref) | {"sizes": sweep.sizes or None}
    for name_, a, b in claim_pairs(out):
        out[name_]["contrasts"][f"{a} vs {b}"] = comparison()
    return out


@pytest.mark.parametrize(
    "preset, expected",
    [
        ("quick", [("he", "He & Hofmann (2024)", "sas-p"), ("xiong", "Xiong et al. (2020)", "xiong_post-ln_wu0")]),
        (
            "warmup-answers",
            [
                ("clm", "Xiong et al. (2020)", "clm_post-ln_wu0"),
                ("clm", "Liu et al. (2020)", "clm_admin_wu0"),
                ("clm", "Huang et al. (2020)", "clm_t-fixup_wu0"),
                ("clm", "Xie et al. (2023)", "clm_resi-dual_wu0"),
                ("clm", "Zhuo et al. (2025)", "clm_hybridnorm_wu0"),
                ("clm", "Chen et al. (2025)", "clm_derf"),
                ("clm", "Zhu et al. (2025)", "clm_dyt"),
                ("clm", "Qiu et al. (2025)", "clm_gate"),
                ("clm", "Qiu et al. (2025)", "clm_gate"),
                ("translation", "Xiong et al. (2020)", "translation_post-ln_wu0"),
                ("translation", "Liu et al. (2020)", "translation_admin_wu0"),
                ("translation", "Huang et al. (2020)", "translation_t-fixup_wu0"),
                ("translation", "Xie et al. (2023)", "translation_resi-dual_wu0"),
            ],
        ),
        (
            "stream",
            [
                ("L4", "Zhu et al. (2025)", "hyper-connections_L4"),
                ("L4", "Kimi Team (2026)", "attn-res_L4"),
                ("L4", "Xie et al. (2025)", "hyper-connections_L4"),
                ("L4", "Zhou et al. (2024)", "value-residual-small_L4"),
            ],
        ),
        (
            "zoo",
            [("zoo", "He & Hofmann (2024)", b) for b in ("v-skipinit", "shaped-vp", "sas", "sas-p", "sas-p-nonorm")]
            + [
                ("zoo", "Zhu et al. (2025)", "dyt"),
                ("zoo", "Zhu et al. (2025)", "hyper-connections"),
                ("zoo", "Kimi Team (2026)", "attn-res"),
                ("zoo", "Shleifer et al. (2021)", "normformer"),
                ("zoo", "Xie et al. (2025)", "hyper-connections"),
                ("zoo", "OLMo et al. (2025)", "olmo2"),
                ("zoo", "Allen-Zhu (2025)", "canon"),
            ],
        ),
        ("scaling", [("scaling", "He & Hofmann (2024)", "sas-p"), ("scaling", "Xiao et al. (2025)", "muddformer")]),
        (
            "optimizers",  # each paper's rule under AdamW, the rules restated for Muon under Muon
            [
                ("he-adamw", "He & Hofmann (2024)", "sas-p-adamw"),
                ("he-adamw", "Zhu et al. (2025)", "dyt-adamw"),
                ("he-muon", "He & Hofmann (2024)", "sas-p-muon"),
                ("he-muon", "Xiong et al. (2020)", "post-ln_wu0-muon"),
            ],
        ),
    ],
)
def test_each_preset_asks_the_claims_of_its_groups(preset, expected):
    claims = judge_claims(preset_experiments(preset))
    assert [(c["experiment"], c["paper"], c["group"]) for c in claims] == expected
    assert all(c["rule"] and c["rule_id"] and c["status"] in ("holds", "does not hold", "inconclusive") for c in claims)
