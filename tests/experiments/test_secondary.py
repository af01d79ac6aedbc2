"""Secondary metrics in verdicts.json: BLEU and fine-tuning dev scores, failures counted apart, compared seed by
seed, each metric a family of its own."""

import json

import pytest

from blocklab.experiments import build_sweep
from blocklab.experiments.downstream import stage_dir
from blocklab.experiments.secondary import finetune_value
from blocklab.experiments.verdicts import choose_best, compute_verdicts

LRS = [1e-3, 3e-3, 1e-2]
BASE = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 100}}


def write(out, name, s):
    d = out / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps(s))


def summary(loss, status="completed", **extra):
    return {"status": status, "final_eval_loss": loss, "unigram_eval_loss": 6.0, "n_params": 1000, **extra}


def sweep_of(task="clm", finetune=None):
    spec = {
        "name": "s",
        "seeds": [0, 1, 2, 3, 4],
        "base": {**BASE, "model": {**BASE["model"], "task": task}},
        "target_run": "pre-ln",
        "tune": {"values": LRS},
        "runs": [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}],
    }
    if finetune:
        spec["finetune"] = finetune
    return build_sweep(spec)


def finals_of(sweep, out, final_summary):
    for r in sweep.tuning_runs:
        write(out, r.name, summary([5.0, 4.5, 4.8][LRS.index(r.value)]))
    finals = sweep.final_runs(choose_best(sweep, out))
    for r in finals:
        write(out, r.name, final_summary(r))
    return finals


def test_a_fine_tuning_score_is_the_mean_of_the_completed_fine_tunes():
    result = {"status": "completed", "scores": [70.0, None, 80.0], "statuses": ["completed", "diverged", "completed"]}
    assert finetune_value(result) == pytest.approx(75.0)
    assert finetune_value({"status": "skipped", "scores": [], "statuses": []}) is None
    assert finetune_value(None) is None


def test_bleu_is_compared_higher_is_better_in_a_family_of_its_own(tmp_path):
    sweep = sweep_of()
    bleu = {"pre-ln": [20.0, 20.5, 19.8, 20.2, 20.1], "sas-p": [25.0, 25.3, 24.9, 25.1, 25.2]}
    loss = {"pre-ln": [4.50, 4.52, 4.51, 4.53, 4.50], "sas-p": [4.51, 4.50, 4.52, 4.52, 4.51]}
    finals = finals_of(sweep, tmp_path, lambda r: summary(loss[r.group][r.seed], final_bleu=bleu[r.group][r.seed]))
    exp = compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]
    b = exp["secondary"]["final_bleu"]
    assert b["lower_is_better"] is False and b["cap"] == 0.0
    assert b["groups"]["sas-p"]["mean"] == pytest.approx(25.1)
    c = b["comparisons"]["sas-p"]
    assert c["verdict"] == "better" and c["difference"] > 0 and c["test"] == "paired"
    # Each metric is a family of its own: one test each, no correction across them.
    primary = exp["comparisons"]["sas-p"]
    assert exp["family_size"] == 1 and b["family_size"] == 1
    assert primary["p_holm"] == pytest.approx(primary["p"]) and c["p_holm"] == pytest.approx(c["p"])


def test_a_failed_translation_run_fails_bleu_too(tmp_path):
    sweep = sweep_of()

    def final(r):
        if r.group == "sas-p" and r.seed == 0:
            return summary(None, status="diverged", final_bleu=None)
        return summary(4.5, final_bleu=20.0 + r.seed if r.seed != 4 else 0.0)

    finals = finals_of(sweep, tmp_path, final)
    g = compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]["secondary"]["final_bleu"]["groups"]["sas-p"]
    # diverged: no BLEU; a BLEU of 0 is no better than the cap: failed on this metric too
    assert g["scores"] == [None, 21.0, 22.0, 23.0, None] and g["statuses"] == ["diverged"] + ["completed"] * 3 + [
        "plateau"
    ]
    assert g["failed"] == 2


def test_a_fine_tuning_stage_gives_one_dev_score_per_pre_training_seed(tmp_path):
    sweep = sweep_of("mlm", {"tasks": ["wrong-operator"], "seeds": [0, 1]})
    finals = finals_of(sweep, tmp_path, lambda r: summary(4.5))
    dev = {"pre-ln": [60.0, 61.0, 59.0, 60.5, 60.2], "sas-p": [70.0, 71.0, 69.0, 70.5, 70.1]}
    for r in finals:
        d = stage_dir(tmp_path, r.name, "wrong-operator", None)
        d.mkdir(parents=True)
        base = dev[r.group][r.seed]
        result = {
            "status": "completed",
            "majority_baseline": 50.0,
            "seeds": [0, 1],
            "scores": [base - 1, base + 1],
            "statuses": ["completed", "completed"],
        }
        if r.group == "sas-p" and r.seed == 2:  # no fine-tune completed: this pre-training run fails the task
            result = {
                "status": "completed",
                "majority_baseline": 50.0,
                "seeds": [0, 1],
                "scores": [None, None],
                "statuses": ["diverged", "diverged"],
            }
        (d / "finetune.json").write_text(json.dumps(result))
    m = compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]["secondary"]["finetune:wrong-operator"]
    assert m["cap"] == 50.0 and m["lower_is_better"] is False
    assert m["groups"]["pre-ln"]["scores"] == [60.0, 61.0, 59.0, 60.5, 60.2]
    assert m["groups"]["sas-p"]["scores"] == [70.0, 71.0, None, 70.5, 70.1] and m["groups"]["sas-p"]["failed"] == 1
    c = m["comparisons"]["sas-p"]
    assert c["failures"] == [1, 5, 0, 5] and c["test"] == "paired" and c["verdict"] == "better"


def test_a_sweep_without_bleu_or_fine_tuning_has_no_secondary_metrics(tmp_path):
    sweep = sweep_of()
    finals = finals_of(sweep, tmp_path, lambda r: summary(4.5 + 0.01 * r.seed))
    assert compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]["secondary"] == {}
