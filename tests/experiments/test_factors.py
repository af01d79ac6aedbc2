"""Factors: an experiment crossed with a setting (the optimizer), one experiment per level, and the interactions:
does a group's difference from the reference change with the level? Checked against scipy and by simulation."""

import json

import numpy as np
import pytest
from scipy import stats as st

from blocklab.errors import UserError
from blocklab.experiments import build_sweep
from blocklab.experiments.factors import judge_interactions
from blocklab.experiments.judge import family_words, pair_test
from blocklab.experiments.verdicts import choose_best, compute_verdicts

BASE = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 100}}
RUNS = [
    {"name": "pre-ln", "model.block": "pre-ln", "experiment": "opt"},
    {"name": "sas-p", "model.block": "sas-p", "experiment": "opt"},
]


def factor_sweep(levels=("adamw", "adam"), **factor):
    exp = {
        "target_run": "pre-ln",
        "tune": {"values": [1e-3, 1e-2]},
        "factor": {"key": "train.optimizer", "levels": list(levels)} | factor,
    }
    return build_sweep({"name": "f", "base": BASE, "seeds": [0, 1, 2, 3, 4], "experiments": {"opt": exp}, "runs": RUNS})


def test_a_factor_makes_one_experiment_per_level_with_the_same_seeds():
    s = factor_sweep()
    assert list(s.experiments) == ["opt-adamw", "opt-adam"]
    assert s.experiments["opt-adam"]["target_run"] == "pre-ln-adam"
    cells = {(r.group, r.config.train.optimizer) for r in s.runs}
    assert cells == {(f"{g}-{o}", o) for g in ("pre-ln", "sas-p") for o in ("adamw", "adam")}
    assert {r.config.train.seed for r in s.runs} == {5, 6} and s.final_seeds() == [0, 1, 2, 3, 4]
    assert s.factors["opt"]["groups"]["sas-p-adam"] == "sas-p"


@pytest.mark.parametrize(
    "factor, message",
    [
        ({"levels": ["adamw"]}, "two or more distinct values"),
        ({"key": "train.lr"}, "cannot be a factor"),
        ({"key": "lr"}, "dotted setting"),
        ({"lvls": 1}, "unknown field 'lvls'"),
    ],
)
def test_bad_factors_are_one_line(factor, message):
    with pytest.raises(UserError, match=message) as e:
        factor_sweep(**factor) if "levels" not in factor else factor_sweep(levels=factor.pop("levels"), **factor)
    assert "\n" not in str(e.value)


def test_a_run_may_not_set_its_experiments_factor():
    runs = [dict(RUNS[0], **{"train.optimizer": "sgd"}), RUNS[1]]
    exp = {
        "target_run": "pre-ln",
        "tune": {"values": [1e-3]},
        "factor": {"key": "train.optimizer", "levels": ["adamw", "adam"]},
    }
    with pytest.raises(UserError, match="sets train.optimizer, the factor"):
        build_sweep({"name": "f", "base": BASE, "experiments": {"opt": exp}, "runs": runs})


def write(out, name, score):
    d = out / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    s = {"status": "completed", "final_eval_loss": score, "unigram_eval_loss": 6.0, "n_params": 1000, "tokens": 1}
    (d / "summary.json").write_text(json.dumps(s))


@pytest.mark.parametrize(
    "shift, verdict",
    [
        ({"adamw": -0.3, "adam": +0.3}, "flips"),  # SAS-P better under one, worse under the other
        ({"adamw": -0.3, "adam": -0.3}, "same order"),
        ({"adamw": -0.3, "adam": 0.0}, "unresolved"),
    ],
)
def test_interactions_from_stored_runs(tmp_path, shift, verdict):
    s = factor_sweep()
    seed_effect = {0: 0.0, 1: 0.1, 2: -0.05, 3: 0.07, 4: -0.02}
    noise = {"adamw": [0.01, -0.012, 0.008, -0.005, 0.003], "adam": [-0.004, 0.009, 0.002, -0.011, 0.006]}
    for r in s.tuning_runs:
        write(tmp_path, r.name, 4.5 if r.value == 1e-3 else 4.8)
    finals = s.final_runs(choose_best(s, tmp_path))
    for r in finals:
        opt = r.config.train.optimizer
        base = 4.0 + seed_effect[r.seed]
        write(tmp_path, r.name, base + (shift[opt] + noise[opt][r.seed] if r.group.startswith("sas-p") else 0.0))
    v = compute_verdicts(s, tmp_path, finals)
    i = v["interactions"]["opt"]["sas-p"]
    assert i["factor"] == "train.optimizer" and i["levels"] == ["adamw", "adam"] and i["verdict"] == verdict
    d = [v["experiments"][f"opt-{o}"]["comparisons"][f"sas-p-{o}"]["difference"] for o in ("adamw", "adam")]
    assert i["difference"] == pytest.approx(d) and i["interaction"] == pytest.approx(d[1] - d[0])
    # the interaction test is scipy's paired t test on the two levels' per-seed differences
    per = {o: [shift[o] + noise[o][k] for k in range(5)] for o in ("adamw", "adam")}
    assert i["p"] == pytest.approx(st.ttest_rel(per["adam"], per["adamw"]).pvalue, rel=1e-6)
    assert v["experiments"]["opt-adam"]["factor"] == {
        "name": "opt",
        "key": "train.optimizer",
        "level": "adam",
        "value": "adam",
        "levels": ["adamw", "adam"],
    }


def _cell(level, ref, groups):
    names = {"pre-ln": ref} | groups
    gs = {
        f"{n}-{level}": {
            "seeds": list(range(5)),
            "statuses": ["completed"] * 5,
            "scores": list(x),
            "facts": {"factor_group": n},
        }
        for n, x in names.items()
    }
    ref_name = f"pre-ln-{level}"
    comps = {n: pair_test(g, gs[ref_name]) for n, g in gs.items() if n != ref_name}
    exp = {"reference": ref_name, "groups": gs, "comparisons": comps, "margin": 0.1}
    exp["factor"] = {"name": "opt", "key": "train.optimizer", "level": level, "value": level, "levels": ["a", "b"]}
    return exp


def test_an_a_a_factor_says_flips_in_at_most_five_percent_of_sweeps():
    """1,000 sweeps whose two levels are the same optimizer: 5 groups with true differences from -0.1 to +0.1 at both
    levels, each seed's data shared (sd 0.1) and each run's noise its own (sd 0.03)."""
    rng = np.random.Generator(np.random.PCG64(45))
    effects = [-0.1, -0.05, 0.0, 0.05, 0.1]
    flips = 0
    for _ in range(1000):
        cells = {}
        for level in ("a", "b"):
            seed_effect = rng.normal(0, 0.1, 5)
            ref = 4.0 + seed_effect + rng.normal(0, 0.03, 5)
            groups = {f"g{i}": 4.0 + e + seed_effect + rng.normal(0, 0.03, 5) for i, e in enumerate(effects)}
            cells[f"opt-{level}"] = _cell(level, ref, groups)
        family_words([(c, True, False, 0.1) for e in cells.values() for c in e["comparisons"].values()])
        found = judge_interactions(cells, lambda e: e["margin"])["opt"]
        flips += any(x["verdict"] == "flips" for x in found.values())
    assert flips / 1000 <= 0.05


def test_the_report_draws_each_groups_difference_at_each_level_and_the_summary_tables_the_interactions(tmp_path):
    from blocklab.reporting.factors import factor_sections
    from blocklab.reporting.summary import summary_markdown

    s = factor_sweep()
    for r in s.tuning_runs:
        write(tmp_path, r.name, 4.5 if r.value == 1e-3 else 4.8)
    finals = s.final_runs(choose_best(s, tmp_path))
    for r in finals:
        flip = -0.3 if r.config.train.optimizer == "adamw" else 0.3
        write(
            tmp_path, r.name, 4.0 + 0.01 * r.seed + (flip + 0.003 * (r.seed % 2) if r.group.startswith("sas-p") else 0)
        )
    v = compute_verdicts(s, tmp_path, finals)
    (sec,) = factor_sections(v, tmp_path)
    assert sec.figures and sec.figures[0].path.is_file() and sec.tables[0].rows[0][-1] == "flips"
    md = summary_markdown(v)
    assert "opt: interactions with train.optimizer" in md and "**flips**" in md
