"""run_sweep's check of stored runs: --rerun-changed moves a changed run aside, and the verdicts with it."""

import json

import pytest

from blocklab.errors import UserError
from blocklab.experiments.runner import check_changed
from blocklab.experiments.sweep import RunSpec
from blocklab.training.config import load_config, to_toml


def stored(out, name, lr):
    (out / "runs" / name).mkdir(parents=True)
    (out / "runs" / name / "config.toml").write_text(to_toml(load_config(None, {"train": {"lr": lr}})))


def asked(name, lr):
    return RunSpec(name, name, {}, config=load_config(None, {"train": {"lr": lr}}))


def test_a_changed_run_moves_aside_with_the_verdicts_that_rest_on_it(tmp_path):
    stored(tmp_path, "pre-ln_lr0.001_s0", 1e-3)
    stored(tmp_path, "kept", 1e-3)
    (tmp_path / "verdicts.json").write_text('{"old": true}')
    runs = [asked("pre-ln_lr0.001_s0", 3e-3), asked("kept", 1e-3)]
    with pytest.raises(UserError, match=r"pre-ln_lr0.001_s0 \(train.lr 0.001 -> 0.003\)"):
        check_changed(runs, tmp_path, rerun_changed=False, log=lambda *a: None)
    assert (tmp_path / "verdicts.json").is_file()  # a refusal moves nothing
    (tmp_path / "replaced" / "verdicts.json").parent.mkdir()
    (tmp_path / "replaced" / "verdicts.json").write_text('{"older": true}')  # an earlier move: kept
    check_changed(runs, tmp_path, rerun_changed=True, log=lambda *a: None)
    assert not (tmp_path / "runs" / "pre-ln_lr0.001_s0").exists() and (tmp_path / "runs" / "kept").is_dir()
    assert (tmp_path / "replaced" / "pre-ln_lr0.001_s0" / "config.toml").is_file()
    assert not (tmp_path / "verdicts.json").exists()
    assert json.loads((tmp_path / "replaced" / "verdicts-2.json").read_text()) == {"old": True}
    assert json.loads((tmp_path / "replaced" / "verdicts.json").read_text()) == {"older": True}
