"""`blocklab finetune` as a user types it: one seed, damaged checkpoints, output folders that cannot be
written, and messages that only suggest options the command has."""

import errno
import json
import shutil

import pytest

from blocklab.cli import main
from blocklab.cli.finetune import result_line
from blocklab.reporting.downstream import _cell


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("finetune-cli") / "mlm"
    args = ["train", "--out", str(out), "--no-progress", "--model.task", "mlm", "--model.d_model", "16"]
    args += ["--model.n_layers", "1", "--model.n_heads", "2", "--model.d_ff", "32", "--data.source", str(corpus_dir)]
    args += ["--data.vocab_size", "300", "--data.seq_len", "16", "--train.steps", "6", "--train.batch_size", "4"]
    args += ["--train.checkpoint_every", "3", "--train.keep_checkpoints", "0"]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.jsonl"
    rows = [{"sentence": f"x = {'True' if i % 2 else 'None'}", "label": i % 2} for i in range(48)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _ft(capsys, run, task, out, *extra):
    args = ["finetune", "--run", str(run), "--task", task, "--out", str(out), "--epochs", "1", "--no-progress"]
    code = main([*args, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_one_seed_is_said_as_one_seed(mlm_run, task, tmp_path, capsys):
    code, out, err = _ft(capsys, mlm_run, task, tmp_path / "ft", "--seeds", "0")
    assert code == 0, err
    last = out.strip().splitlines()[-1]
    assert "(one seed)" in last and "±" not in last
    assert json.loads((tmp_path / "ft" / "finetune.json").read_text())["sd"] is None


def test_the_result_line_without_a_spread_or_a_baseline():
    result = {
        "task": "t",
        "metric": "accuracy",
        "seeds": [0, 1],
        "scores": [71.0, None],
        "statuses": ["completed", "diverged"],
        "mean": 71.0,
        "sd": None,
        "failed": 1,
        "majority_baseline": None,
    }
    assert "accuracy 71.0 (one seed) over seeds [0, 1] (71.0, diverged); majority baseline n/a" in result_line(
        result, "out"
    )
    assert _cell({"mean": 71.0, "sd": None}) == "71.0 (one seed)"  # the report's table says it too
    assert _cell({"mean": 71.0, "sd": 2.0}) == "71.0 ± 2.0"


@pytest.mark.parametrize("damage", ["empty latest", "corrupted weights"])
def test_a_damaged_checkpoint_gives_the_newest_that_verifies(mlm_run, task, tmp_path, capsys, damage):
    run = tmp_path / "mlm"
    shutil.copytree(mlm_run, run)
    if damage == "empty latest":
        (run / "checkpoints" / "latest").write_text("")
    else:
        (run / "checkpoints" / "step-00000006" / "model.safetensors").write_bytes(b"cut")
    code, out, err = _ft(capsys, run, task, tmp_path / "ft")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    want = 6 if damage == "empty latest" else 3
    assert f"using the checkpoint of step {want}" in warnings[0]
    assert json.loads((tmp_path / "ft" / "finetune.json").read_text())["init_step"] == want


def test_no_checkpoint_that_verifies_is_one_line(mlm_run, task, tmp_path, capsys):
    run = tmp_path / "mlm"
    shutil.copytree(mlm_run, run)
    for step in (3, 6):
        (run / "checkpoints" / f"step-{step:08d}" / "manifest.json").unlink()
    code, out, err = _ft(capsys, run, task, tmp_path / "ft")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no checkpoint in" in err


def _no_data(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the data was built before the output folder was checked")

    monkeypatch.setattr("blocklab.training.finetune.load_data", refuse)


def test_out_that_is_a_file_fails_before_the_data_is_built(mlm_run, task, tmp_path, capsys, monkeypatch):
    _no_data(monkeypatch)
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "below"):
        code, _, err = _ft(capsys, mlm_run, task, out)
        assert code == 2 and len(err.strip().splitlines()) == 1 and str(tmp_path / "f") in err, err


@pytest.mark.parametrize("code, words", [(errno.EROFS, "choose another path"), (errno.ENOSPC, "free some space")])
def test_an_unwritable_or_full_out_fails_before_the_data_is_built(
    mlm_run, task, tmp_path, capsys, monkeypatch, code, words
):
    _no_data(monkeypatch)

    def refuse(self, data):  # tests run as root: permission bits would not stop the write
        raise OSError(code, "refused", str(self))

    monkeypatch.setattr("pathlib.Path.write_bytes", refuse)
    rc, _, err = _ft(capsys, mlm_run, task, tmp_path / "ft")
    assert rc == 2 and words in err and str(tmp_path / "ft") in err and len(err.strip().splitlines()) == 1


def test_other_settings_suggest_overwrite_which_finetune_accepts(mlm_run, task, tmp_path, capsys):
    assert _ft(capsys, mlm_run, task, tmp_path / "ft")[0] == 0
    code, _, err = _ft(capsys, mlm_run, task, tmp_path / "ft", "--train.lr", "3e-4")
    assert code == 2 and "train.lr 0.0001 -> 0.0003" in err and "--overwrite" in err
    code, out, err = _ft(capsys, mlm_run, task, tmp_path / "ft", "--train.lr", "3e-4", "--overwrite")
    assert code == 0, err
    config = (tmp_path / "ft" / "seed-0" / "config.toml").read_text()
    assert "lr = 0.0003" in config
    code, out, err = _ft(capsys, mlm_run, task, tmp_path / "ft", "--train.lr", "3e-4")
    assert code == 0 and "earlier, kept" in out + err


def test_a_sweep_offers_no_option_that_compare_lacks(monkeypatch, tmp_path):
    from blocklab.experiments import downstream

    seen = {}

    def fake(*args, **kwargs):
        seen.update(kwargs)
        return {"status": "completed"}

    monkeypatch.setattr("blocklab.training.finetune.finetune", fake)
    monkeypatch.setattr("blocklab.training.checkpoint.checkpoint_steps", lambda root: [5])
    stage = downstream.FinetuneStage(tasks=["t"])
    run = type("Run", (), {"name": "r", "label": "r"})()
    downstream.run_finetunes(stage, [run], tmp_path, log=lambda *a: None)
    assert "--overwrite" not in seen["replace_hint"] and str(tmp_path / "finetune" / "r") in seen["replace_hint"]
