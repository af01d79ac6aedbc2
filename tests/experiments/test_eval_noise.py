"""The eval set's own noise in a comparison, paired over the eval batches every run sees."""

import json
import math
import statistics

import pytest

from blocklab import stats
from blocklab.experiments import build_sweep
from blocklab.experiments.verdicts import choose_best, compute_verdicts

LRS = [1e-3, 3e-3]


def test_paired_se_against_the_standard_error_of_the_differences():
    a, b = [2.0, 5.0, 3.0, 7.0], [2.1, 5.0, 3.2, 7.05]
    d = [x - y for x, y in zip(a, b)]
    assert stats.paired_se(a, b) == pytest.approx(statistics.stdev(d) / math.sqrt(4))
    # Weighted: the same as repeating each item in proportion, up to the n/(n-1) factor of the item count.
    w = [1, 3, 1, 1]
    m = sum(wi * di for wi, di in zip(w, d)) / 6
    expected = math.sqrt(4 / 3 * sum((wi / 6) ** 2 * (di - m) ** 2 for wi, di in zip(w, d)))
    assert stats.paired_se(a, b, w) == pytest.approx(expected)
    assert stats.paired_se([1.0], [2.0]) is None and stats.paired_se([1.0, 2.0], [1.0]) is None


def summary(batches, tokens=(100, 100, 100, 50)):
    loss = sum(b * t for b, t in zip(batches, tokens)) / sum(tokens)
    return {
        "status": "completed",
        "final_eval_loss": loss,
        "unigram_eval_loss": 9.0,
        "n_params": 10,
        "final_eval_se": statistics.stdev(batches) / math.sqrt(len(batches)),
        "final_eval_batches": {"loss": list(batches), "tokens": list(tokens)},
    }


@pytest.mark.parametrize("per_batch", [True, False])
def test_the_sweeps_eval_noise_is_paired_and_far_below_the_unpaired_one(tmp_path, per_batch):
    sweep = build_sweep(
        {
            "name": "s",
            "seeds": [0, 1],
            "base": {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 10}},
            "target_run": "pre-ln",
            "tune": {"values": LRS},
            "runs": [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}],
        }
    )
    files = [3.0, 6.0, 4.0, 5.0]  # eval files of very different difficulty, alike for every run

    def write(run, shift):
        d = tmp_path / "runs" / run.name
        d.mkdir(parents=True)
        shifts = [shift + 0.01 * ((i + run.seed) % 2) for i in range(4)]
        s = summary([f + s for f, s in zip(files, shifts)])
        if not per_batch:  # a run written before summaries kept per-batch losses
            del s["final_eval_batches"]
        (d / "summary.json").write_text(json.dumps(s))

    for r in sweep.tuning_runs:
        write(r, 0.0 if r.value == LRS[0] else 0.5)
    finals = sweep.final_runs(choose_best(sweep, tmp_path))
    for r in finals:
        write(r, -0.1 if r.group == "sas-p" else 0.0)
    exp = compute_verdicts(sweep, tmp_path, finals)["experiments"]["s"]
    unpaired = exp["groups"]["sas-p"]["eval_se"]
    if not per_batch:
        assert exp["eval_noise_paired"] is False and exp["eval_noise"] == pytest.approx(unpaired)
        return
    assert exp["eval_noise_paired"] is True
    assert exp["eval_noise"] == pytest.approx(exp["groups"]["sas-p"]["eval_se_paired"])
    assert exp["eval_noise"] < 0.02 < 0.5 < unpaired  # the files' spread cancels in the difference


@pytest.mark.parametrize("paired, words", [(True, "(paired, seed by seed)"), (False, "one run's final eval loss")])
@pytest.mark.parametrize("noise, rule", [(0.004, "below a third"), (0.03, "the tests' variance includes it")])
def test_the_report_says_which_eval_noise_it_gives_and_whether_it_is_below_a_third_of_the_seed_spread(
    paired, words, noise, rule
):
    from blocklab.reporting.verdict_words import numbers_note

    exp = {
        "reference": "a",
        "groups": {"a": {"label": "A", "seeds": [0, 1]}},
        "noise_floor": 0.05,
        "pooled_sd": 0.05,
        "eval_noise": noise,
        "eval_noise_paired": paired,
        "family_size": 1,
    }
    note = numbers_note(exp, 3, 1)
    assert f"Eval noise: {noise:g}, the median standard error" in note and words in note
    assert f"{noise / 0.05:.2f} of the spread over seeds" in note and rule in note
