"""What --resume may change (training/rundir.py): a resume continues the run, it never makes it another.

The command-line cases run `blocklab train` in-process as a user types it, on runs of a few steps of a
d_model 16 model; a refused resume exits 2 with one line and leaves every file of the run as it was."""

import json

import pytest

from blocklab.cli import main
from blocklab.training.config import TrainConfig
from blocklab.training.rundir import steps_refusal
from tests.helpers import as_args


@pytest.mark.parametrize(
    "settings, steps, word",
    [
        ({"schedule": "linear", "warmup_steps": 10}, 240, "linear decay"),
        ({"schedule": "cosine", "warmup_steps": 10}, 240, "cosine decay"),
        ({"schedule": "constant"}, 240, "default 5%"),  # a warm-up of 6, 5% of 120: a 240-step run's is 12
        ({"schedule": "inv_sqrt", "warmup_steps": 0}, 240, "inv_sqrt"),  # held for 5% of the steps
        ({"schedule": "constant", "warmup_steps": 10}, 100, "cannot shorten"),
        ({"schedule": "constant", "warmup_steps": 10}, 240, None),
        ({"schedule": "constant", "warmup_steps": 0}, 240, None),
        ({"schedule": "constant"}, 125, None),  # 5% of 125 rounds to 6 too: the same warm-up
        ({"schedule": "inv_sqrt", "warmup_steps": 10}, 240, None),  # decays from the warm-up's end
        ({"schedule": "inv_sqrt", "warmup_steps": 0, "inv_sqrt_scale": 20}, 240, None),
        ({"schedule": "linear"}, 120, None),  # the same steps: nothing changes
    ],
)
def test_which_steps_a_run_can_go_on_to(settings, steps, word):
    why = steps_refusal(TrainConfig(steps=120, **settings), steps)
    assert (why is None) if word is None else (word in why), why


def tiny(corpus_dir, steps=4, **train):
    return {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 16},
        "model": {"block": "pre-ln", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32},
        "train": {
            "steps": steps,
            "batch_size": 2,
            "log_every": 1,
            "eval_every": 1000,
            "eval_batches": 1,
            "checkpoint_every": 2,
            "lr": 3e-3,
            **train,
        },
    }


def blocklab(*args) -> int:
    return main([str(a) for a in ("train", *args, "--no-progress")])


def files(run):
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def refused(capsys, run, *args, words=()):
    """`train --out run --resume *args` exits 2 with one line holding `words`, and the run is untouched."""
    before = files(run)
    capsys.readouterr()
    rc = blocklab("--out", run, "--resume", *args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert files(run) == before


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "train, steps, words",
    [
        ({"schedule": "linear", "warmup_steps": 1}, 4, ["linear decay reaches zero at train.steps=4"]),
        ({"schedule": "cosine", "warmup_steps": 1}, 4, ["cosine decay"]),
        ({"schedule": "constant"}, 20, ["warm-up of 1 step is the default 5% of train.steps=20"]),
        ({"schedule": "inv_sqrt", "warmup_steps": 0}, 30, ["inv_sqrt decay starts at 5% of train.steps=30"]),
    ],
)
def test_extending_a_schedule_that_derives_from_the_steps_is_refused(tmp_path, corpus_dir, capsys, train, steps, words):
    run = tmp_path / "r"
    assert blocklab("--out", run, *as_args(tiny(corpus_dir, steps, **train))) == 0
    refused(capsys, run, "--train.steps", 2 * steps, words=[*words, "--overwrite"])


def test_a_run_never_shrinks_nor_changes_what_it_trains(tmp_path, corpus_dir, capsys):
    run = tmp_path / "r"
    assert blocklab("--out", run, *as_args(tiny(corpus_dir, 6, schedule="constant", warmup_steps=0))) == 0
    refused(capsys, run, "--train.steps", 3, words=["cannot shorten this 6-step run to train.steps=3"])
    refused(capsys, run, "--train.steps", 5, words=["cannot shorten"])
    refused(capsys, run, "--train.lr", 0.01, words=["train.lr=0.003, not 0.01", "--overwrite"])
    refused(capsys, run, "--train.steps", 12, "--train.warmup_steps", 2, words=["train.warmup_steps=0, not 2"])
    # A config file read again is held to the same rules: its default warm-up would follow the new steps.
    cfg = tmp_path / "run.toml"
    cfg.write_text('[train]\nschedule = "constant"\nsteps = 20\n')
    base = tiny(corpus_dir, 20)
    del base["train"]["steps"]
    other = tmp_path / "other"
    assert main([str(a) for a in ["train", cfg, "--out", other, "--no-progress", *as_args(base)]]) == 0
    before = files(other)
    capsys.readouterr()
    rc = main([str(a) for a in ["train", cfg, "--out", other, "--resume", "--no-progress", *as_args(base)]])
    assert rc == 0 and files(other).keys() == before.keys()  # the same config: resumes, trains nothing
    longer = ["--train.steps", 40]
    rc = main([str(a) for a in ["train", cfg, "--out", other, "--resume", "--no-progress", *as_args(base), *longer]])
    assert rc == 2 and "default 5%" in capsys.readouterr().err


@pytest.mark.parametrize(
    "train",
    [{"schedule": "constant", "warmup_steps": 2}, {"schedule": "inv_sqrt", "warmup_steps": 0, "inv_sqrt_scale": 2}],
)
def test_an_extended_run_is_the_longer_run(tmp_path, corpus_dir, train):
    """Where no schedule quantity derives from train.steps, 4 steps resumed to 8 are the 8-step run, bit
    for bit: the same learning rates and the same losses (on CPU)."""
    assert blocklab("--out", tmp_path / "long", *as_args(tiny(corpus_dir, 8, **train))) == 0
    assert blocklab("--out", tmp_path / "cut", *as_args(tiny(corpus_dir, 4, **train))) == 0
    assert blocklab("--out", tmp_path / "cut", "--resume", "--train.steps", 8) == 0
    long, cut = rows(tmp_path / "long"), rows(tmp_path / "cut")
    assert [r["step"] for r in cut if "loss" in r] == list(range(1, 9))
    assert [(r["lr"], r["loss"]) for r in cut if "loss" in r] == [(r["lr"], r["loss"]) for r in long if "loss" in r]


def test_a_resume_past_a_truncated_latest_checkpoint_falls_back_and_says_so(tmp_path, corpus_dir, capsys):
    run = tmp_path / "run"
    cfg = tiny(corpus_dir, steps=4, schedule="constant", warmup_steps=0)
    assert blocklab("--out", run, *as_args(cfg)) == 0
    weights = run / "checkpoints" / "step-00000004" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a write cut short
    capsys.readouterr()
    assert (
        blocklab("--out", run, "--resume", *as_args(tiny(corpus_dir, steps=6, schedule="constant", warmup_steps=0)))
        == 0
    )
    err = capsys.readouterr().err
    assert "step-00000004" in err and "using the checkpoint of step 2" in err
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s] == sorted(set(steps)) and max(steps) == 6  # steps 3..6 trained again, once
    assert json.loads((run / "summary.json").read_text())["step"] == 6
