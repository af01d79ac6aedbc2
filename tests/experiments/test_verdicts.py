"""verdicts.json from stored summaries: capping, best values, ranges, comparisons, Holm, claims (no training)."""

import json

import pytest

from blocklab.experiments import build_sweep
from blocklab.experiments.verdicts import choose_best, compute_verdicts, run_score
from tests.helpers import SPEC_EXPERIMENT_FIELDS, SPEC_GROUP_FIELDS

CAP = 6.0
BASE = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 100}}
LRS = [1e-3, 3e-3, 1e-2, 3e-2, 1e-1]


def summary(score, status="completed", n_params=1000):
    return {
        "status": status,
        "final_eval_loss": score if status == "completed" else None,
        "unigram_entropy": CAP,
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


def xiong_sweep():
    runs = [
        {"name": f"{b}{'_wu0' if w == 0 else ''}", "model.block": b, "train.warmup_steps": w, "experiment": "x"}
        for b in ("post-ln", "pre-ln")
        for w in (10, 0)
    ]
    return build_sweep(
        {
            "name": "t",
            "seeds": [0, 1, 2],
            "base": BASE,
            "runs": runs,
            "experiments": {"x": {"target_run": "pre-ln", "tune": {"values": LRS}}},
        }
    )


def fill(out, sweep, curves: dict, finals: dict):
    """curves: {group: [score or None (stalled) per lr]}; finals: {group: [scores of the final seeds]}."""
    for r in sweep.tuning_runs:
        score = curves[r.group][LRS.index(r.value)]
        write(out, r.name, summary(score, "completed" if score is not None else "stalled"))
    best = choose_best(sweep, out)
    runs = sweep.final_runs(best)
    for r in runs:
        write(out, r.name, summary(finals[r.group][r.seed]))
    return runs, best


XIONG_CURVES = {
    "post-ln": [5.0, 4.6, 4.9, None, None],
    "post-ln_wu0": [5.0, 4.7, None, None, None],
    "pre-ln": [5.2, 4.58, 4.5, 4.55, None],
    "pre-ln_wu0": [5.2, 4.8, 4.5, 4.8, None],
}
XIONG_FINALS = {
    "post-ln": [4.60, 4.62, 4.61],
    "post-ln_wu0": [4.70, 4.72, 4.69],
    "pre-ln": [4.50, 4.52, 4.51],
    "pre-ln_wu0": [4.52, 4.50, 4.53],
}


def test_scores_are_capped_and_failures_score_the_cap():
    assert run_score(summary(4.0), CAP, 0.1) == (4.0, False, True)
    assert run_score(summary(5.95), CAP, 0.1) == (5.95, False, False)  # trained, but not 0.1 below the cap
    assert run_score(summary(6.5), CAP, 0.1) == (CAP, True, False)  # worse than the unigram model
    assert run_score(summary(None, "stalled"), CAP, 0.1) == (CAP, True, False)
    assert run_score(summary(None, "diverged"), CAP, 0.1) == (CAP, True, False)
    assert run_score(None, CAP, 0.1) == (CAP, True, False)  # never finished


def test_xiong_claim_holds_on_ranges_and_every_spec_field_is_written(tmp_path):
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
    assert exp["cap"] == CAP and exp["tuned"] == "train.lr" and exp["reference"] == "pre-ln"
    post0, post = exp["groups"]["post-ln_wu0"], exp["groups"]["post-ln"]
    assert post0["trainable"] == [1e-3, 3e-3] and post["trainable"] == [1e-3, 1e-2]
    assert post0["curve"][2]["scores"] == [CAP] and post0["curve"][2]["statuses"] == ["stalled"]
    assert post0["stable"] == [3e-3, 3e-3] and post0["best_at_edge"] is False
    assert exp["groups"]["pre-ln"]["trainable"] == [1e-3, 3e-2] and exp["groups"]["pre-ln"]["stable"] == [3e-3, 3e-2]
    assert post0["sensitivity"] == pytest.approx(sum(abs(m - 4.7) for m in [5.0, 4.7, 6, 6, 6]) / 5)
    assert post0["seeds"] == [0, 1, 2] and post0["mean"] == pytest.approx(4.7033333)
    assert exp["noise_floor"] == pytest.approx(0.01) and exp["eval_noise"] == pytest.approx(0.01)
    c = exp["comparisons"]["post-ln_wu0"]
    assert c["verdict"] == "worse" and c["difference"] == pytest.approx(0.19333333) and c["ci95"][0] > 0
    assert exp["comparisons"]["pre-ln_wu0"]["verdict"] == "indistinguishable"
    ps = sorted(c["p"] for c in exp["comparisons"].values())
    assert min(c["p_holm"] for c in exp["comparisons"].values()) == pytest.approx(3 * ps[0])
    claim = next(c for c in v["claims"] if c["paper"].startswith("Xiong"))
    assert claim["status"] == "holds" and "0.001..0.003" in claim["why"]
    assert not [c for c in v["claims"] if c["paper"].startswith("He")]  # no simplified block here


def test_xiong_claim_fails_when_post_ln_without_warmup_keeps_its_range(tmp_path):
    sweep = xiong_sweep()
    curves = dict(XIONG_CURVES, **{"post-ln_wu0": [5.0, 4.7, 4.9, None, None]})
    finals, _ = fill(tmp_path, sweep, curves, XIONG_FINALS)
    claim = compute_verdicts(sweep, tmp_path, finals)["claims"][0]
    assert claim["status"] == "does not hold"


def test_a_best_at_the_grids_edge_is_never_a_verdict_on_the_claim(tmp_path):
    sweep = xiong_sweep()
    curves = dict(XIONG_CURVES, **{"pre-ln_wu0": [5.2, 4.8, 4.5, 4.4, 4.3]})
    finals, best = fill(tmp_path, sweep, curves, XIONG_FINALS)
    v = compute_verdicts(sweep, tmp_path, finals)
    assert best[("pre-ln_wu0", None)] == 1e-1 and v["experiments"]["x"]["groups"]["pre-ln_wu0"]["best_at_edge"]
    assert v["claims"][0]["status"] == "inconclusive" and "edge" in v["claims"][0]["why"]


def test_a_group_that_fails_everywhere_has_no_ranges(tmp_path):
    sweep = xiong_sweep()
    curves = dict(XIONG_CURVES, **{"post-ln_wu0": [None] * 5})
    finals, best = fill(tmp_path, sweep, curves, dict(XIONG_FINALS, **{"post-ln_wu0": [7.0, 7.0, 7.0]}))
    g = compute_verdicts(sweep, tmp_path, finals)["experiments"]["x"]["groups"]["post-ln_wu0"]
    assert best[("post-ln_wu0", None)] == 1e-3  # ties at the cap: the lowest value
    assert (g["best_at_edge"], g["stable"], g["trainable"], g["sensitivity"]) == (None, None, None, None)
    assert g["scores"] == [CAP] * 3


def he_sweep(seeds=(0, 1, 2)):
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
        ([4.51, 4.49, 4.52], "holds", "indistinguishable"),
        ([4.90, 4.92, 4.91], "does not hold", "worse"),
        ([4.58, 4.40, 4.70], "inconclusive", "indistinguishable"),  # interval reaches past +tolerance
    ],
)
def test_he_claim_from_the_interval_and_the_parameter_count(tmp_path, sas_scores, status, verdict):
    sweep = he_sweep()
    for r in sweep.tuning_runs:
        write(tmp_path, r.name, summary([5.0, 4.5, 4.8][LRS.index(r.value)], n_params=900 if "sas" in r.name else 1000))
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    scores = {"pre-ln": [4.50, 4.52, 4.51], "sas-p": sas_scores}
    for r in finals:
        write(tmp_path, r.name, summary(scores[r.group][r.seed], n_params=900 if r.group == "sas-p" else 1000))
    v = compute_verdicts(sweep, tmp_path, finals)
    assert v["experiments"]["h"]["comparisons"]["sas-p"]["verdict"] == verdict
    claim = v["claims"][0]
    assert claim["status"] == status and "900 parameters against 1,000 (-10%)" in claim["why"]


def test_one_seed_is_said_and_kept_out_of_holm(tmp_path):
    sweep = he_sweep(seeds=(0,))
    for r in sweep.tuning_runs:
        write(tmp_path, r.name, summary(4.5))
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    for r in finals:
        write(tmp_path, r.name, summary(4.4 if r.group == "sas-p" else 4.5))
    v = compute_verdicts(sweep, tmp_path, finals)
    c = v["experiments"]["h"]["comparisons"]["sas-p"]
    assert c["verdict"] == "one seed" and c["p_holm"] is None and c["difference"] == pytest.approx(-0.1)
    assert v["experiments"]["h"]["groups"]["sas-p"]["ci95"] is None and v["claims"][0]["status"] == "inconclusive"


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
