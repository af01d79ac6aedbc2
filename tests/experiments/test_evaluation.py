"""A sweep's [eval] stage: every completed final clm run scored by the lm-eval harness on its exported model,
the groups compared on the chosen metric as on the loss (in the Holm family), and the report's table."""

import json

import pytest

from blocklab.errors import UserError
from blocklab.experiments import build_sweep
from blocklab.experiments.evaluation import chosen_metrics, metric_value, parse_eval
from blocklab.experiments.runner import run_sweep
from blocklab.reporting.secondary_words import secondary_table

pytest.importorskip("lm_eval")
METRIC = "eval:blocklab_val_bpb/bits_per_byte"


def spec_of(overrides, **extra):
    base = dict(overrides, train=dict(overrides["train"], steps=4, checkpoint_every=100, eval_every=4))
    return {
        "name": "ev",
        "base": base,
        "seeds": [0, 1],
        "runs": [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}],
        "eval": {"tasks": ["blocklab_val_bpb"], "limit": 1},
        **extra,
    }


@pytest.mark.slow
def test_the_verdicts_compare_the_groups_on_the_harness_metric(tmp_path, overrides):
    out = tmp_path / "out"
    result = run_sweep(build_sweep(spec_of(overrides)), out, progress=False, log=lambda *a: None)
    exp = result["verdicts"].experiments["ev"]
    m = exp.secondary[METRIC]
    assert m.lower_is_better is True and m.limit == 1
    for group, entry in m.groups.items():
        assert entry.seeds == [0, 1]
        for seed, score in zip(entry.seeds, entry.scores):
            stored = [
                json.loads(p.read_text()) for p in (out / "runs" / f"{group}_s{seed}" / "eval").glob("results-*.json")
            ]
            assert len(stored) == 1 and score == metric_value(stored[0], "blocklab_val_bpb", "bits_per_byte")
            assert 0 < score < 20
    c = m.comparisons["sas-p"]
    assert c.against == "pre-ln" and c.n == [2, 2] and c.test == "welch"
    # the harness metric is a family of its own: one test, no correction from the loss's
    assert m.family_size == 1 and c.p_holm == c.p
    table = secondary_table(exp, "ev")
    assert any("bits per byte (lm-eval)" in row[0] for row in table.rows)
    assert "Lower is better" in table.notes[0]
    # Run again: every evaluation is read back, nothing trains or evaluates anew
    said = []
    run_sweep(build_sweep(spec_of(overrides)), out, progress=False, log=said.append)
    assert sum("stored result" in line for line in said) == 4 and not any("evaluating" in line for line in said)


def test_the_stage_is_checked_when_the_sweep_is_built(overrides):
    with pytest.raises(UserError, match="unknown eval field 'tsks'"):
        parse_eval({"tsks": ["x"]})
    with pytest.raises(ValueError, match="TASK/METRIC"):
        parse_eval({"tasks": ["blocklab_val_bpb"], "metrics": ["other/acc"]})
    with pytest.raises(ValueError, match="limit"):
        parse_eval({"tasks": ["blocklab_val_bpb"], "limit": 0})
    spec = spec_of(overrides)
    spec["base"] = dict(spec["base"], model=dict(spec["base"]["model"], task="mlm"))
    with pytest.raises(UserError, match="causal language models"):
        build_sweep(spec)
    assert build_sweep(spec_of(overrides)).to_json()["eval"]["tasks"] == ["blocklab_val_bpb"]


def test_one_metric_per_task_by_default_or_the_stages_own():
    record = {
        "results": {
            "blocklab_val_bpb": {"word_perplexity,none": 9.0, "byte_perplexity,none": 2.0, "bits_per_byte,none": 1.0},
            "blocklab_wrong_operator": {"acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.4},
        }
    }
    stage = parse_eval({"tasks": ["blocklab_val_bpb", "blocklab_wrong_operator"]})
    assert chosen_metrics(stage, record) == [("blocklab_val_bpb", "bits_per_byte"), ("blocklab_wrong_operator", "acc")]
    stage = parse_eval({"tasks": ["blocklab_wrong_operator"], "metrics": ["blocklab_wrong_operator/acc_norm"]})
    assert chosen_metrics(stage, record) == [("blocklab_wrong_operator", "acc_norm")]
    assert metric_value(record, "blocklab_wrong_operator", "acc_norm") == 0.4
    assert metric_value(record, "blocklab_wrong_operator", "f1") is None and metric_value(None, "x", "acc") is None
