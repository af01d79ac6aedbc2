"""verdicts.json from stored summaries (no training): failures counted apart, best values, ranges, the edge
extension, paired comparisons, the family, claims."""

import json

import pytest
from scipy.stats import boschloo_exact

from blocklab.experiments import build_sweep
from blocklab.experiments.judge import classify
from blocklab.experiments.verdicts import choose_best, compute_verdicts, extension_runs
from tests.helpers import SPEC_COMPARISON_FIELDS, SPEC_EXPERIMENT_FIELDS, SPEC_GROUP_FIELDS

CAP = 6.0
BASE = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 100}}
LRS = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]


def summary(score, status="completed", n_params=1000):
    return {
        "status": status,
        "final_eval_loss": score if status == "completed" else None,
        "unigram_eval_loss": CAP,
        "n_params": n_params,
        "tokens_per_s": 1000.0,
        "tokens": 100,
        "flops_per_token": 10.0,
        "final_eval_se": 0.01,
    }


def write(out, name, s):
    d = out / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps(s))


def xiong_sweep(extend=2):
    runs = [
        {"name": f"{b}{'_wu0' if w == 0 else ''}", "model.block": b, "train.warmup_steps": w, "experiment": "x"}
        for b in ("post-ln", "pre-ln")
        for w in (10, 0)
    ]
    return build_sweep(
        {
            "name": "t",
            "base": BASE,
            "runs": runs,
            "experiments": {"x": {"target_run": "pre-ln", "tune": {"values": LRS, "extend": extend}}},
        }
    )


def fill(out, sweep, curves: dict, finals: dict):
    """curves: {group: [score or None (stalled) per lr]}, the same on both tuning seeds; finals: {group: [score
    or None (diverged) per final seed 0-4]}."""
    for r in sweep.tuning_runs:
        score = curves[r.group][LRS.index(r.value)]
        write(out, r.name, summary(score, "completed" if score is not None else "stalled"))
    best = choose_best(sweep, out)
    runs = sweep.final_runs(best)
    for r in runs:
        score = finals[r.group][r.seed]
        write(out, r.name, summary(score, "completed" if score is not None else "diverged"))
    return runs, best


XIONG_CURVES = {
    "post-ln": [5.0, 4.6, 4.9, None, None],
    "post-ln_wu0": [5.0, 4.7, None, None, None],
    "pre-ln": [5.2, 4.58, 4.5, 4.55, None],
    "pre-ln_wu0": [5.2, 4.8, 4.5, 4.8, None],
}
XIONG_FINALS = {
    "post-ln": [4.60, 4.62, 4.61, 4.63, 4.59],
    "post-ln_wu0": [4.70, 4.72, 4.69, None, 4.71],
    "pre-ln": [4.50, 4.52, 4.51, 4.53, 4.50],
    "pre-ln_wu0": [4.505, 4.515, 4.52, 4.535, 4.505],
}


def test_a_run_completes_or_fails_by_its_status_and_how_far_it_got_past_the_cap():
    assert classify("completed", 4.0, CAP, 0.1, True) == "completed"
    assert classify("completed", 5.95, CAP, 0.1, True) == "plateau"  # trained, but not 0.1 past the cap
    assert classify("completed", 6.5, CAP, 0.1, True) == "plateau"  # worse than the unigram model
    assert classify("completed", 5.9, CAP, 0.1, True) == "completed"  # exactly the tolerance: trained
    assert classify("plateau", 4.0, CAP, 0.1, True) == "completed"  # a rejudge reads the score again
    assert classify("stalled", None, CAP, 0.1, True) == "stalled"
    assert classify("diverged", None, CAP, 0.1, True) == "diverged"
    assert (
        classify(None, None, CAP, 0.1, True) == "missing"
        and classify("interrupted", 4.0, CAP, 0.1, True) == "interrupted"
    )
    assert classify("completed", 0.0, 0.0, 0.0, False) == "plateau"  # zero BLEU: no better than the cap
    assert classify("completed", 0.5, 0.0, 0.0, False) == "completed"


def test_xiong_sweep_every_field_failures_apart_and_the_claim(tmp_path):
    sweep = xiong_sweep()
    finals, best = fill(tmp_path, sweep, XIONG_CURVES, XIONG_FINALS)
    assert best == {
        ("post-ln", None): 3e-3,
        ("post-ln_wu0", None): 3e-3,
        ("pre-ln", None): 1e-2,
        ("pre-ln_wu0", None): 1e-2,
    }
    v = compute_verdicts(sweep, tmp_path, finals)
    exp = v["experiments"]["x"]
    assert SPEC_EXPERIMENT_FIELDS <= set(exp) and all(SPEC_GROUP_FIELDS <= set(g) for g in exp["groups"].values())
    assert all(SPEC_COMPARISON_FIELDS <= set(c) for c in exp["comparisons"].values())
    assert exp["cap"] == CAP and exp["reference"] == "pre-ln" and exp["tuning_seeds"] == [5, 6] and v["format"] == 2
    post0 = exp["groups"]["post-ln_wu0"]
    assert post0["trainable"] == [1e-3, 3e-3] and exp["groups"]["post-ln"]["trainable"] == [1e-3, 1e-2]
    assert post0["curve"][2]["scores"] == [None, None] and post0["curve"][2]["statuses"] == ["stalled"] * 2
    # sensitivity: failed values at the cap
    assert post0["sensitivity"] == pytest.approx(sum(abs(m - 4.7) for m in [5.0, 4.7, 6, 6, 6]) / 5)
    # the diverged final seed is counted, never scored
    assert post0["seeds"] == [0, 1, 2, 3, 4] and post0["scores"][3] is None and post0["failed"] == 1
    assert post0["mean"] == pytest.approx(sum([4.70, 4.72, 4.69, 4.71]) / 4)
    c = exp["comparisons"]["post-ln_wu0"]
    assert c["failures"] == [1, 5, 0, 5] and c["p_fail"] is not None
    assert c["test"] == "paired" and c["n"] == [4, 4] and c["verdict"] == "worse"
    eq = exp["comparisons"]["pre-ln_wu0"]
    assert eq["test"] == "paired" and eq["verdict"] == "equivalent" and eq["mde80"] > 0
    # the family: three score tests and one failure test
    assert exp["family_size"] == 4 and all(c["family_size"] == 4 for c in exp["comparisons"].values())
    claim = next(c for c in v["claims"] if c["paper"].startswith("Xiong"))
    assert claim["status"] == "holds" and "0.001..0.003" in claim["why"] and claim["rule"]


def test_xiong_claim_does_not_hold_when_post_ln_without_warmup_keeps_its_range(tmp_path):
    sweep = xiong_sweep()
    curves = dict(XIONG_CURVES, **{"post-ln_wu0": [5.0, 4.7, 4.9, None, None]})
    finals, _ = fill(tmp_path, sweep, curves, XIONG_FINALS)
    assert compute_verdicts(sweep, tmp_path, finals)["claims"][0]["status"] == "does not hold"


def test_a_best_at_the_edge_extends_the_grid_before_the_final_seeds(tmp_path):
    sweep = xiong_sweep(extend=1)
    curves = dict(XIONG_CURVES, **{"pre-ln_wu0": [5.2, 4.8, 4.5, 4.4, 4.3]})
    for r in sweep.tuning_runs:
        score = curves[r.group][LRS.index(r.value)]
        write(tmp_path, r.name, summary(score, "completed" if score is not None else "stalled"))
    extra = extension_runs(sweep, tmp_path)
    assert [(r.group, r.value, r.seed) for r in extra] == [("pre-ln_wu0", 0.3, 5), ("pre-ln_wu0", 0.3, 6)]
    sweep.runs += extra
    for r in extra:
        write(tmp_path, r.name, summary(4.25))
    # extend = 1: no second value beyond the top, though the best is still at the edge
    assert extension_runs(sweep, tmp_path) == []
    best = choose_best(sweep, tmp_path)
    assert best[("pre-ln_wu0", None)] == 0.3
    finals = sweep.final_runs(best)
    for r in finals:
        write(tmp_path, r.name, summary(XIONG_FINALS[r.group][r.seed] or 4.5))
    v = compute_verdicts(sweep, tmp_path, finals)
    g = v["experiments"]["x"]["groups"]["pre-ln_wu0"]
    assert [p["value"] for p in g["curve"]][-1] == 0.3 and g["curve"][-1]["extended"] is True
    assert g["best_at_edge"] is True and v["experiments"]["x"]["comparisons"]["pre-ln_wu0"]["verdict"] == "at edge"
    assert v["claims"][0]["status"] == "inconclusive" and "edge" in v["claims"][0]["why"]


def test_a_group_that_fails_every_seed_is_fails_and_never_compared_on_loss(tmp_path):
    sweep = xiong_sweep()
    curves = dict(XIONG_CURVES, **{"post-ln_wu0": [None] * 5})
    finals, best = fill(tmp_path, sweep, curves, dict(XIONG_FINALS, **{"post-ln_wu0": [None] * 5}))
    exp = compute_verdicts(sweep, tmp_path, finals)["experiments"]["x"]
    g, c = exp["groups"]["post-ln_wu0"], exp["comparisons"]["post-ln_wu0"]
    assert best[("post-ln_wu0", None)] == 1e-3 and g["best_completed"] is False  # the fallback: the lowest
    assert (g["best_at_edge"], g["stable"], g["trainable"], g["sensitivity"]) == (None, None, None, None)
    assert g["scores"] == [None] * 5 and g["failed"] == 5 and g["mean"] is None and g["ci95"] is None
    assert c["verdict"] == "fails" and c["p"] is None and c["failures"] == [5, 5, 0, 5]
    assert c["p_fail"] == pytest.approx(boschloo_exact([[5, 0], [0, 5]]).pvalue)


def test_group_intervals_never_show_a_score_no_completed_run_can_have(tmp_path):
    sweep = xiong_sweep()
    finals, _ = fill(tmp_path, sweep, XIONG_CURVES, dict(XIONG_FINALS, **{"post-ln": [4.0, 5.85, 4.0, 5.8, 4.1]}))
    g = compute_verdicts(sweep, tmp_path, finals)["experiments"]["x"]["groups"]["post-ln"]
    assert g["ci95"][1] == pytest.approx(CAP - 0.1)  # cut at the failure line


def he_sweep(seeds=(0, 1, 2, 3, 4)):
    return build_sweep(
        {
            "name": "h",
            "seeds": list(seeds),
            "base": BASE,
            "target_run": "pre-ln",
            "tune": {"values": LRS[:3]},
            "runs": [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}],
        }
    )


@pytest.mark.parametrize(
    "sas_scores, status, verdict",
    [
        ([4.51, 4.49, 4.52, 4.52, 4.50], "holds", "equivalent"),
        ([4.90, 4.92, 4.91, 4.93, 4.90], "does not hold", "worse"),
        ([4.58, 4.30, 4.70, 4.40, 4.65], "inconclusive", "unresolved"),  # the interval reaches past +margin
    ],
)
def test_he_claim_from_the_family_interval_and_the_parameter_count(tmp_path, sas_scores, status, verdict):
    sweep = he_sweep()
    for r in sweep.tuning_runs:
        write(tmp_path, r.name, summary([5.0, 4.5, 4.8][LRS.index(r.value)], n_params=900 if "sas" in r.name else 1000))
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    scores = {"pre-ln": [4.50, 4.52, 4.51, 4.53, 4.50], "sas-p": sas_scores}
    for r in finals:
        write(tmp_path, r.name, summary(scores[r.group][r.seed], n_params=900 if r.group == "sas-p" else 1000))
    v = compute_verdicts(sweep, tmp_path, finals)
    assert v["experiments"]["h"]["comparisons"]["sas-p"]["verdict"] == verdict
    claim = v["claims"][0]
    assert claim["status"] == status and "900 parameters against 1,000 (-10%)" in claim["why"]


def test_one_seed_is_said_and_kept_out_of_the_family(tmp_path):
    sweep = he_sweep(seeds=(0,))
    for r in sweep.tuning_runs:
        write(tmp_path, r.name, summary(4.5))
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    for r in finals:
        write(tmp_path, r.name, summary(4.4, n_params=900) if r.group == "sas-p" else summary(4.5))
    v = compute_verdicts(sweep, tmp_path, finals)
    c = v["experiments"]["h"]["comparisons"]["sas-p"]
    assert c["verdict"] == "one seed" and c["p_holm"] is None and c["difference"] == pytest.approx(-0.1)
    assert v["experiments"]["h"]["family_size"] == 0 and v["claims"][0]["status"] == "inconclusive"


def test_sizes_give_a_frontier_and_a_compute_multiplier(tmp_path):
    sweep = build_sweep(
        {
            "name": "s",
            "seeds": [0, 1],
            "base": BASE,
            "target_run": "pre-ln",
            "tune": {"values": [1e-3]},
            "sizes": [{"train.steps": 10}, {"train.steps": 20}, {"train.steps": 40}],
            "runs": [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}],
        }
    )
    for r in sweep.tuning_runs:
        write(tmp_path, r.name, summary(5.0))
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    for r in finals:
        flops = 10.0 * 10 * 2**r.size  # each size twice the compute of the one before
        loss = 5.0 * flops**-0.1 * (0.95 if r.group.startswith("sas-p") else 1.0) + 0.001 * r.seed
        write(tmp_path, r.name, dict(summary(loss), tokens=10 * 2**r.size))
    f = compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]["frontier"]
    assert [p["flops"] for p in f["pre-ln"]["points"]] == [100.0, 200.0, 400.0]
    assert f["pre-ln"]["fit"]["alpha"] == pytest.approx(0.1, rel=0.05) and f["pre-ln"]["multiplier"] == 1.0
    # 0.95x the loss at the same compute: Pre-LN needs 0.95^(-1/0.1) = 1.67x the compute
    assert f["sas-p"]["multiplier"] == pytest.approx(0.95**-10, rel=0.05)
    lo, hi = f["sas-p"]["multiplier_ci95"]
    assert lo < f["sas-p"]["multiplier"] < hi
