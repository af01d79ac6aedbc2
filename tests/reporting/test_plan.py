"""`blocklab report DIR` on a sweep folder checks each run folder against the plan in sweep.json, as compare
checks a stored run before reusing it: a run whose settings differ is refused in one line, or with
--allow-changed reported marked and without the verdicts that rest on it; planned runs without a folder and
folders the plan does not name are said at the top of the report."""

import json
import re
import shutil

import pytest

from blocklab.cli import main
from blocklab.experiments import build_sweep
from blocklab.experiments.runner import plan_json
from blocklab.training.config import to_toml
from tests.reporting.fake_verdicts import verdicts
from tests.reporting.fakes import TINY_MODEL, write_run

# Two experiments named as fake_verdicts' ("he", "xiong"), so that its verdicts.json fits this sweep's parts.
SPEC = {
    "name": "planned",
    "experiments": {"he": {}, "xiong": {}},
    "base": {
        "model": {k: v for k, v in TINY_MODEL.items() if k != "block"},
        "data": {"seq_len": 32, "vocab_size": 512},
        "train": {"steps": 200, "log_every": 10, "eval_every": 50},
    },
    "runs": [
        {"name": "pre-ln", "model.block": "pre-ln", "experiment": "he"},
        {"name": "sas", "model.block": "sas", "experiment": "he"},
        {"name": "x-pre", "model.block": "pre-ln", "experiment": "xiong"},
    ],
}


def planned_sweep(root, with_cli=True):
    """A sweep folder as compare leaves it (command line: --train.lr 0.003), without training: sweep.json from
    the same code compare writes it with, each run folder a fake run with the config.toml compare asked for."""
    sweep = build_sweep(SPEC, {"train": {"lr": 3e-3}})
    saved = plan_json(sweep, sweep.runs)
    if not with_cli:  # as an older blocklab wrote it
        del saved["cli"]
    root.mkdir(parents=True)
    (root / "sweep.json").write_text(json.dumps(saved))
    for run in sweep.runs:
        path = write_run(root / "runs" / run.name, run.config.model.block, 0.01, last_step=200, lr=3e-3)
        (path / "config.toml").write_text(to_toml(run.config))
    return root


def set_lr(run_dir, lr):
    path = run_dir / "config.toml"
    path.write_text(re.sub(r"(?m)^lr = .*$", f"lr = {lr}", path.read_text()))


def test_a_run_whose_settings_differ_from_the_plan_is_refused_in_one_line(tmp_path, capsys):
    root = planned_sweep(tmp_path / "sweep")
    set_lr(root / "runs" / "sas", 0.01)  # trained again by hand at another rate
    assert main(["report", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("blocklab report: error: 1 stored run(s)")
    assert "sas (train.lr 0.01 -> 0.003)" in err and "--allow-changed" in err and "--rerun-changed" in err
    assert not (root / "report.md").exists()


@pytest.mark.slow
def test_with_allow_changed_the_run_is_marked_and_its_experiments_verdicts_left_out(tmp_path, capsys):
    root = planned_sweep(tmp_path / "sweep")
    (root / "verdicts.json").write_text(json.dumps(verdicts()))
    set_lr(root / "runs" / "sas", 0.01)
    assert main(["report", str(root), "--allow-changed"]) == 0
    out = capsys.readouterr().out
    assert "Changed runs: 1 run(s) whose settings differ" in out and "sas (train.lr 0.01 -> 0.003)" in out
    md = (root / "report.md").read_text()
    assert "- **Changed runs**: 1 run(s)" in md and "| sas [changed] | sas |" in md
    assert "the verdicts of he are left out" in md
    page = (root / "report.html").read_text()
    assert 'id="verdicts-xiong"' in page and 'id="verdicts-he"' not in page  # xiong rests on no changed run
    assert 'id="claims-he"' not in page


@pytest.mark.slow
def test_missing_and_unplanned_run_folders_are_said_not_refused(tmp_path, capsys):
    root = planned_sweep(tmp_path / "sweep")
    shutil.rmtree(root / "runs" / "x-pre")
    write_run(root / "runs" / "copied-in", "sas-p", 0.01, last_step=200)
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert "Missing runs: 1 planned run(s) have no run folder (not trained yet, or removed): x-pre." in out
    assert "Not planned: 1 run folder(s) that sweep.json does not plan" in out and "runs/copied-in" in out
    md = (root / "report.md").read_text()
    assert "- **Missing runs**:" in md and "- **Not planned**:" in md and "Changed runs" not in md


@pytest.mark.slow
def test_an_older_sweep_json_cannot_be_checked_and_the_report_says_so(tmp_path, capsys):
    root = planned_sweep(tmp_path / "sweep", with_cli=False)
    set_lr(root / "runs" / "sas", 0.01)  # not seen: the plan's command-line settings are unknown
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    assert "Settings check: not made: this sweep.json does not record the command line's settings" in out


@pytest.mark.slow
def test_a_sweep_compare_trained_reports_then_a_hand_edited_run_is_refused(tmp_path, overrides, capsys):
    """The runs the trainer wrote match the plan compare wrote (command-line settings included), until one
    is edited; a removed run is then said to be missing."""
    lines = ['name = "real"']
    for section, values in overrides.items():
        lines.append(f"[base.{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items() if k != "block"]
    lines += ['[[runs]]\nname = "a"\n"model.block" = "pre-ln"', '[[runs]]\nname = "b"\n"model.block" = "sas-p"']
    (tmp_path / "sweep.toml").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    argv = ["compare", str(tmp_path / "sweep.toml"), "--out", str(out), "--jobs", "1", "--no-progress"]
    assert main([*argv, "--train.steps", "2", "--train.eval_every", "2"]) == 0  # its report is checked too
    assert main(["report", str(out)]) == 0
    assert not re.search(r"^(Changed runs|Missing runs|Not planned|Settings check):", capsys.readouterr().out, re.M)
    set_lr(out / "runs" / "a", 0.01)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a (train.lr 0.01 -> 0.003)" in err and "--allow-changed" in err
    assert main(["report", str(out), "--allow-changed"]) == 0
    assert "| a [changed] |" in (out / "report.md").read_text()
    shutil.rmtree(out / "runs" / "b")
    assert main(["report", str(out), "--allow-changed"]) == 0
    assert (
        "Missing runs: 1 planned run(s) have no run folder (not trained yet, or removed): b." in capsys.readouterr().out
    )
