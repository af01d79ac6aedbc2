"""Stalled runs: a loss that stays at the unigram entropy ends the run; a healthy run passes through it."""

import json
import random

import pytest

from blocklab.cli import main
from blocklab.run_summary import read_summary
from blocklab.training import load_config, train
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.config import TrainConfig
from blocklab.training.stall import StallDetector
from tests.helpers import as_args

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "lambda",
    "sigma",
    "theta",
    "kappa",
    "zeta",
    "eta",
    "iota",
    "rho",
    "tau",
    "phi",
    "chi",
    "psi",
    "mu",
    "nu",
    "xi",
]
ZIPF = [1 / (i + 1) for i in range(len(WORDS))]


def word_corpus(folder, cyclic: bool):
    """Words drawn with Zipf frequencies: i.i.d. (nothing to learn beyond the frequencies, so the best
    possible loss is the unigram entropy) or one fixed sequence repeated (predictable, far below it)."""
    rng = random.Random(0)
    folder.mkdir()
    cycle = " ".join(rng.choices(WORDS, ZIPF, k=16))
    for k in range(4):
        lines = (cycle if cyclic else " ".join(rng.choices(WORDS, ZIPF, k=16)) for _ in range(400))
        (folder / f"doc{k}.txt").write_text("\n".join(lines))
    return folder


def tiny(source, steps=40):
    return {
        "data": {"source": str(source), "vocab_size": 512, "seq_len": 32},
        "model": {"block": "pre-ln", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {
            "steps": steps,
            "batch_size": 4,
            "lr": 1e-2,
            "warmup_steps": 5,
            "log_every": 1,
            "eval_every": 1000,
            "eval_batches": 2,
            "checkpoint_every": 1000,
            "stall_patience": 20,
            "stall_margin": 0.1,
        },
    }


def test_detector_on_constructed_loss_curves():
    h = 6.5
    noise = [0.12, -0.1, 0.05, -0.14, 0.08, 0.0, -0.05, 0.13, -0.09, 0.02]  # per-batch scatter around H
    d = StallDetector(h, warmup_steps=10, margin=0.1, patience=20)
    flags = [d.update(step, h + noise[step % 10]) for step in range(1, 61)]
    assert flags.index(True) + 1 == 30  # steps 11-30 fill the window: warm-up steps never count
    healthy = StallDetector(h, warmup_steps=10, margin=0.1, patience=20)
    # Passing through H on the way down (0.02 nats a step) is not a stall, nor is a plateau above H.
    assert not any(healthy.update(s, h + 0.6 - 0.02 * s + noise[s % 10]) for s in range(1, 200))
    # Leaving the plateau slowly (0.006 nats a step, inside the margin for whole windows) is not a stall,
    # nor, until it stops falling, is the same descent with a plateau at H afterwards.
    slow = StallDetector(h, warmup_steps=0, margin=0.1, patience=20)
    assert not any(slow.update(s, h + 0.09 - 0.006 * s) for s in range(1, 31))
    assert [slow.update(s, h - 0.09) for s in range(31, 41)].index(True) + 31 > 31
    high = StallDetector(h, warmup_steps=0, margin=0.1, patience=20)
    assert not any(high.update(s, h + 0.5 + noise[s % 10]) for s in range(1, 200))
    for off in (StallDetector(h, 0, 0.1, patience=0), StallDetector(None, 0, 0.1, patience=20)):
        assert not off.enabled and not any(off.update(s, h) for s in range(1, 100))
    assert StallDetector(h, 0, 0.1, 20).summary(30) == {
        "unigram_entropy": h,
        "stalled_step": 30,
        "stall_margin": 0.1,
        "stall_patience": 20,
    }


def test_stall_settings_are_validated():
    assert TrainConfig().stall_patience > 0  # on by default
    for bad in (dict(stall_patience=-1), dict(stall_patience=None), dict(stall_margin=0.0), dict(stall_margin=-1)):
        with pytest.raises(ValueError, match="stall_"):
            TrainConfig(**bad)


def test_run_on_iid_words_stalls_keeps_its_checkpoint_and_exits_with_its_code(tmp_path, capsys):
    run = tmp_path / "r"
    over = tiny(word_corpus(tmp_path / "iid", cyclic=False))
    rc = main(["train", "--out", str(run), "--no-progress"] + as_args(over))
    assert rc == 4
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "stalled" and s["step"] == s["stalled_step"] < 40
    assert s["stalled_step"] >= 5 + 20  # warm-up, then a full window
    assert abs(s["final_loss"] - s["unigram_entropy"]) < 0.5
    assert load_checkpoint(run / "checkpoints")["step"] == s["stalled_step"]
    assert "stalled at step" in capsys.readouterr().err


def test_healthy_run_passes_through_the_unigram_entropy(tmp_path):
    s = train(load_config(None, tiny(word_corpus(tmp_path / "cyc", cyclic=True))), tmp_path / "r", progress=False)
    assert s.status == "completed" and not s.has("stalled_step")
    assert s.final_loss < s.unigram_entropy - 0.5 < s.initial_loss


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_resuming_a_stalled_run_stalls_at_once_unless_stall_detection_is_off(tmp_path, capsys):
    """The uninterrupted run stopped at its stall: resuming with more steps makes the same decision (no
    step trained, no row written); --train.stall_patience 0 trains on to the new step count."""
    run = tmp_path / "r"
    over = tiny(word_corpus(tmp_path / "iid", cyclic=False), steps=40)
    over["train"]["schedule"] = "constant"  # a linear decay ends at train.steps: such a run cannot extend
    first = train(load_config(None, over), run, progress=False, log=lambda *a: None)
    assert first.status == "stalled" and first.stalled_step < 40
    stalled_at, rows = first.stalled_step, (run / "metrics.jsonl").read_text()
    assert _rows(run)[-1]["step"] == stalled_at

    over["train"]["steps"] = 60
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--no-progress"] + as_args(over)) == 4  # stalled's code
    assert "stalled at step" in capsys.readouterr().err
    s = read_summary(run)
    assert s.status == "stalled" and s.stalled_step == s.step == stalled_at
    assert s.steps == 60 and s.final_loss == first.final_loss
    assert (run / "metrics.jsonl").read_text() == rows  # nothing trained, nothing logged
    assert load_checkpoint(run / "checkpoints")["step"] == stalled_at

    over["train"]["stall_patience"] = 0
    s = train(load_config(None, over), run, resume=True, progress=False, log=lambda *a: None)
    assert s.status == "completed" and s.step == 60 and not s.has("stalled_step")
    assert [r["step"] for r in _rows(run) if "loss" in r] == list(range(1, 61))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert load_checkpoint(run / "checkpoints")["step"] == 60


def test_a_run_that_stalled_at_its_last_step_resumes_stalled(tmp_path):
    """Stalled exactly at train.steps: the resumed run is still stalled, not 'completed'."""
    run = tmp_path / "r"
    over = tiny(word_corpus(tmp_path / "iid", cyclic=False), steps=40)
    over["train"]["schedule"] = "constant"  # the same rates whatever train.steps: the same stall
    first = train(load_config(None, over), tmp_path / "longer", progress=False, log=lambda *a: None)
    over["train"]["steps"] = first.stalled_step  # a run cannot shrink on resume: a new run this long
    assert train(load_config(None, over), run, progress=False, log=lambda *a: None).step == first.stalled_step
    again = train(load_config(None, over), run, resume=True, progress=False, log=lambda *a: None)
    assert again.status == "stalled" and again.stalled_step == first.stalled_step


def test_resuming_a_stalled_run_with_other_stall_settings_decides_anew(tmp_path):
    """The saved window is judged by the resumed settings: a patience longer than the losses recorded
    cannot call the run stalled yet, so it trains on (and may stall again later)."""
    run = tmp_path / "r"
    over = tiny(word_corpus(tmp_path / "iid", cyclic=False), steps=40)
    over["train"]["schedule"] = "constant"  # so that the run can extend
    first = train(load_config(None, over), run, progress=False, log=lambda *a: None)
    over["train"].update(steps=45, stall_patience=over["train"]["stall_patience"] * 4)
    s = train(load_config(None, over), run, resume=True, progress=False, log=lambda *a: None)
    assert first.stalled_step < 40 and s.step == 45 and s.status == "completed"
