"""`blocklab generate` as a user types it: --step, a damaged latest checkpoint, a full disk behind stdout."""

import shutil
import sys

import pytest
import torch

from blocklab.cli import main
from blocklab.training.generate import generate_text, load_run


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory, corpus_dir):
    out = tmp_path_factory.mktemp("generate") / "run"
    args = ["train", "--out", str(out), "--no-progress", "--model.d_model", "16", "--model.n_layers", "1"]
    args += ["--model.n_heads", "2", "--model.d_ff", "32", "--data.source", str(corpus_dir)]
    args += ["--data.vocab_size", "300", "--data.seq_len", "16", "--train.steps", "6", "--train.batch_size", "4"]
    args += ["--train.checkpoint_every", "3", "--train.keep_checkpoints", "0", "--train.lr", "1e-2"]
    assert main(args) == 0
    return out


def _generate(capsys, run, *extra):
    code = main(["generate", "--run", str(run), "--prompt", "def ", "--max-new-tokens", "8", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_step_reads_an_older_checkpoint(clm_run, capsys):
    code, out, err = _generate(capsys, clm_run, "--step", "3", "--temperature", "0")
    assert code == 0 and err == ""
    assert out == generate_text(clm_run, "def ", 8, 0.0, step=3) + "\n"
    older, latest = load_run(clm_run, step=3)[0].state_dict(), load_run(clm_run)[0].state_dict()
    assert any(not torch.equal(older[k], latest[k]) for k in latest)


def test_a_step_without_a_checkpoint_names_the_steps_there_are(clm_run, capsys):
    code, out, err = _generate(capsys, clm_run, "--step", "4")
    assert code == 2 and out == "" and err.strip().endswith("has no checkpoint of step 4; it has: 3, 6")
    assert len(err.strip().splitlines()) == 1


def test_an_empty_latest_pointer_falls_back_and_says_so(clm_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(clm_run, run)
    (run / "checkpoints" / "latest").write_text("")
    code, out, err = _generate(capsys, run, "--temperature", "0")
    assert code == 0 and out == generate_text(clm_run, "def ", 8, 0.0) + "\n"
    (line,) = err.strip().splitlines()
    assert "latest is empty" in line and "step 6" in line


def test_a_damaged_checkpoint_falls_back_and_none_left_is_one_line(clm_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(clm_run, run)
    (run / "checkpoints" / "step-00000006" / "manifest.json").unlink()
    code, out, err = _generate(capsys, run, "--temperature", "0")
    assert code == 0 and out == generate_text(clm_run, "def ", 8, 0.0, step=3) + "\n"
    assert "step-00000006 is incomplete" in err and "using the checkpoint of step 3" in err
    (run / "checkpoints" / "step-00000003" / "model.safetensors").write_bytes(b"cut")
    code, out, err = _generate(capsys, run)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "no checkpoint in" in err and "step-00000003 is corrupted" in err


def test_a_full_disk_behind_standard_output_is_one_line(clm_run, capsys, monkeypatch):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        code = main(["generate", "--run", str(clm_run), "--prompt", "def ", "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2 and "No space left on device" in err and "free some space" in err
    assert len(err.strip().splitlines()) == 1
