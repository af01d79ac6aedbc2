"""experiments/records.py: what verdicts.json stores of each run beyond its score (training curves' steps to the
reference's loss, probe measures)."""

import json

import pytest

from blocklab.experiments import records as R
from blocklab.training.rundir import STREAM_PROBES


def write_curve(run, losses, every=5):
    run.mkdir(parents=True)
    rows = [{"step": every * (i + 1), "loss": v} for i, v in enumerate(losses)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_training_curve_is_a_trailing_mean_and_skips_bad_lines(tmp_path):
    write_curve(tmp_path / "r", [10.0, 8.0, 6.0, 4.0, 2.0, 0.0])
    with open(tmp_path / "r" / "metrics.jsonl", "a") as f:
        f.write('{"step": 40, "eval_loss": 1}\n{"half')
    curve = R.training_curve(tmp_path / "r")
    assert [s for s, _ in curve] == [5, 10, 15, 20, 25, 30]
    assert curve[1][1] == pytest.approx(9.0) and curve[5][1] == pytest.approx((8 + 6 + 4 + 2 + 0) / 5)
    assert R.training_curve(tmp_path / "missing") == []
    assert R.steps_to([(10, 5.0), (20, 4.0), (30, 3.0)], 4.0) == 20
    assert R.steps_to([(10, 5.0), (20, 4.0)], 1.0) == 20  # never reached: its last step, a bound


class Run:
    def __init__(self, name, seed):
        self.name, self.seed = name, seed


def test_steps_to_reference_reads_the_completed_seeds(tmp_path):
    (tmp_path / "runs").mkdir()
    for seed, k in ((0, 40), (1, 50)):
        write_curve(tmp_path / "runs" / f"pre{seed}", [6.0] * k + [4.0] * 10)
        write_curve(tmp_path / "runs" / f"hc{seed}", [6.0] * (k // 2) + [3.9] * (60 - k // 2))
    runs = {n: [Run(f"{n}{s}", s) for s in (0, 1)] for n in ("pre", "hc")}
    found = R.steps_to_reference(tmp_path, runs, "pre", {"pre": {0, 1}, "hc": {0}})
    assert found["pre"]["level"] == pytest.approx(4.0) and found["pre"]["seeds"] == [0, 1]
    assert found["pre"]["values"] == [5 * (40 + 5), 5 * (50 + 5)]  # the 5th value of 4.0 brings the mean to 4.0
    assert found["hc"]["seeds"] == [0]  # seed 1 of hc did not complete: no measure


def test_probe_measures(tmp_path):
    run = tmp_path / "runs" / "r0"
    run.mkdir(parents=True)
    final = {
        "mixing": {"gain": {"composite_forward": [1.0, 3.0], "composite_backward": [2.0, 5.0]}},
        "attention": {"first_token_mass": [[0.1, 0.3], [0.2, 0.2]], "uniform": 0.1},
    }
    (run / STREAM_PROBES).write_text(json.dumps({"final": final}))
    found = R.probe_measures(tmp_path, [Run("r0", 0), Run("r1", 1)])
    assert found["largest_gain"] == {"seeds": [0], "values": [5.0]}
    assert found["first_token_mass"] == {"seeds": [0], "values": [pytest.approx(0.2)], "uniform": 0.1}
