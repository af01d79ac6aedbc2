"""`blocklab compare` as a user runs it: a tiny tuned sweep end to end, edited sweeps, --list, --seeds, --jobs."""

import json
from pathlib import Path

import pytest

from blocklab import stats
from blocklab.cli import main
from blocklab.experiments import build_sweep, run_sweep
from tests.helpers import SPEC_EXPERIMENT_FIELDS, SPEC_GROUP_FIELDS


def toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v).lower() if isinstance(v, bool) else repr(v)


RUNS = (("pre-ln", "Pre-LN"), ("sas-p", "SAS-P"))


def write_sweep(path, overrides, steps=10, values=(1e-3, 1e-2), seeds=(0, 1), runs=RUNS, probes=None):
    lines = ['name = "tiny"', f"seeds = {list(seeds)}", "[tune]", f"values = {list(values)}"]
    if probes:
        lines += ["[probes]"] + [f"{k} = {toml_value(v)}" for k, v in probes.items()]
    for section, values_ in overrides.items():
        lines.append(f"[base.{section}]")
        for k, v in values_.items():
            if (section, k) not in {
                ("model", "block"),
                ("train", "lr"),
                ("train", "steps"),
                ("train", "eval_every"),
                ("train", "checkpoint_every"),
            }:
                lines.append(f"{k} = {toml_value(v)}")
    lines += [f"steps = {steps}", "eval_every = 100", "checkpoint_every = 100"]
    for name, label in runs:
        lines += ["[[runs]]", f'name = "{name}"', f'label = "{label}"', f'"model.block" = "{name}"']
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_a_tiny_tuned_sweep_writes_verdicts_and_a_report_with_the_sensitivity_figure(tmp_path, overrides, capsys):
    probes = {"blocks": "pre-ln,sas-p", "depths": "1,2", "d-model": 16, "n-heads": 2, "d-ff": 32, "seq-len": 8,
              "batch-size": 2, "vocab-size": 64, "seeds": 1, "batches": 1, "data": "random"}  # fmt: skip
    sweep = write_sweep(tmp_path / "sweep.toml", overrides, probes=probes)
    out = tmp_path / "out"
    assert main(["compare", str(sweep), "--out", str(out), "--jobs", "1", "--no-progress"]) == 0
    # the init probes, computed in their own process while the report drew, are in it
    assert (out / "probes" / "probes.json").is_file() and (out / "figures" / "probes_hidden_norms.png").is_file()
    assert "Signal propagation at initialisation" in (out / "report.md").read_text()
    v = json.loads((out / "verdicts.json").read_text())
    exp = v["experiments"]["tiny"]
    assert SPEC_EXPERIMENT_FIELDS <= set(exp) and set(exp["groups"]) == {"pre-ln", "sas-p"}
    assert all(SPEC_GROUP_FIELDS <= set(g) for g in exp["groups"].values())
    assert [p["value"] for p in exp["groups"]["sas-p"]["curve"]] == [1e-3, 1e-2]
    assert exp["groups"]["sas-p"]["curve"][0]["seeds"] == [2, 3] and exp["groups"]["sas-p"]["seeds"] == [0, 1]
    assert exp["comparisons"]["sas-p"]["verdict"] in stats.WORDS
    runs = sorted(p.name for p in (out / "runs").iterdir())
    best = exp["groups"]["sas-p"]["best"]
    extended = [p["value"] for g in exp["groups"].values() for p in g["curve"] if p["extended"]]
    assert f"sas-p_lr{best:g}_s0" in runs and len(runs) == 8 + 4 + 2 * len(extended)
    assert (out / "figures" / "sensitivity_tiny.png").is_file()
    assert "sensitivity_tiny.png" in (out / "report.md").read_text()
    stdout = capsys.readouterr().out
    assert "SAS-P at lr" in stdout and ("2 seeds" in stdout or "seeds 2 vs 2" in stdout)  # the word, its numbers
    saved = json.loads((out / "sweep.json").read_text())
    assert len(saved["tuning"]) == 8 + 2 * len(extended) and {r["seed"] for r in saved["runs"]} == {0, 1}


def test_an_edited_sweep_is_refused_then_rerun_with_rerun_changed(tmp_path, overrides, capsys):
    spec = {
        "name": "e",
        "base": dict(overrides, train=dict(overrides["train"], steps=4, checkpoint_every=100)),
        "runs": [{"name": "a", "model.block": "pre-ln"}],
    }
    out = tmp_path / "out"
    run_sweep(build_sweep(spec), out, progress=False, log=lambda *a: None)
    first = json.loads((out / "runs" / "a" / "summary.json").read_text())
    edited = tmp_path / "sweep.toml"
    edited.write_text(
        'name = "e"\n[base.data]\n'
        + "".join(f"{k} = {toml_value(v)}\n" for k, v in overrides["data"].items())
        + "[base.model]\n"
        + "".join(f"{k} = {toml_value(v)}\n" for k, v in overrides["model"].items() if k != "block")
        + "[base.train]\n"
        + "".join(
            f"{k} = {toml_value(v)}\n" for k, v in overrides["train"].items() if k not in ("steps", "checkpoint_every")
        )
        + 'steps = 6\ncheckpoint_every = 100\n[[runs]]\nname = "a"\n"model.block" = "pre-ln"\n'
    )
    capsys.readouterr()
    assert main(["compare", str(edited), "--out", str(out), "--no-report", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the sweep's status line: one line
    assert err.startswith("blocklab compare: error:") and "a (train.steps 4 -> 6)" in err and "--rerun-changed" in err
    assert json.loads((out / "runs" / "a" / "summary.json").read_text()) == first  # untouched
    assert main(["compare", str(edited), "--out", str(out), "--no-report", "--jobs", "1", "--rerun-changed"]) == 0
    assert json.loads((out / "replaced" / "a" / "summary.json").read_text()) == first  # kept, not deleted
    assert json.loads((out / "runs" / "a" / "summary.json").read_text())["step"] == 6
    assert main(["compare", str(edited), "--out", str(out), "--no-report", "--jobs", "1"]) == 0  # same now: kept


def test_list_needs_no_out_and_shows_tuning_and_final_runs(capsys):
    assert main(["compare", "--preset", "quick", "--list"]) == 0
    out = capsys.readouterr().out
    assert "pre-ln_lr0.001_s5" in out and "pre-ln_lr0.001_s6" in out and "(tuning)" in out
    assert "final seeds [0, 1, 2, 3, 4] at its best train.lr" in out
    # other final seeds at the rates the same tuning seeds chose
    assert main(["compare", "--preset", "quick", "--list", "--seeds", "7,8,9,10,11"]) == 0
    out = capsys.readouterr().out
    assert "pre-ln_lr0.001_s6" in out and "final seeds [7, 8, 9, 10, 11]" in out
    # seeds chosen by power: the first round's seeds avoid the preset's tuning seeds
    assert main(["compare", "--preset", "quick", "--list", "--seeds", "auto"]) == 0
    out = capsys.readouterr().out
    assert "final seeds [0, 1, 2, 3, 4, 7, 8, 9, 10, 11] at its best" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "1,1"], "--seeds '1,1' is not valid"),
        (["--seeds", "a"], "--seeds 'a' is not valid"),
        (["--jobs", "0", "--out", "x"], "--jobs 0 is not valid"),
        ([], "--out DIR is needed"),
        (["--out", "x", "--train.lr", "0.1"], "--train.lr is the tuned setting"),
    ],
)
def test_compare_argument_errors_are_one_line(capsys, args, message):
    assert main(["compare", "--preset", "quick", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_out_must_be_a_writable_folder(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["compare", "--preset", "quick", "--out", str(f)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_two_jobs_train_the_same_runs_as_one(tmp_path, overrides):
    spec = {
        "name": "j",
        "base": dict(overrides, train=dict(overrides["train"], steps=6, checkpoint_every=100)),
        "runs": [
            {"name": "a", "model.block": "pre-ln"},
            {"name": "b", "model.block": "sas-p"},
            {"name": "c", "model.block": "post-ln"},
        ],
    }
    one = run_sweep(build_sweep(spec), tmp_path / "one", progress=False, log=lambda *a: None, jobs=1)
    two = run_sweep(build_sweep(spec), tmp_path / "two", progress=False, log=lambda *a: None, jobs=2)
    for name in "abc":
        assert two["runs"][name].final_loss == pytest.approx(one["runs"][name].final_loss, rel=1e-5)
        assert two["runs"][name].concurrent_runs == 2 and two["runs"][name].threads >= 1
        assert one["runs"][name].concurrent_runs == 1
    assert json.loads((tmp_path / "two" / "runs" / "b" / "summary.json").read_text())["concurrent_runs"] == 2


def spawned_workers(pid: int) -> list[int] | None:
    """The multiprocessing workers `pid` has spawned, read from /proc; None without one."""
    if not Path("/proc/self/stat").is_file():
        return None
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.slow
def test_a_refused_folder_leaves_no_worker_behind(tmp_path, overrides, capsys):
    """compare starts its workers (they import torch while it plans) only once DIR is checked and locked."""
    import os

    sweep = write_sweep(tmp_path / "sweep.toml", overrides)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["compare", str(sweep), "--out", str(out), "--jobs", "2", "--no-progress"]) == 2
    assert "holds no blocklab sweep" in capsys.readouterr().err
    workers = spawned_workers(os.getpid())
    if workers is None:
        pytest.skip("no /proc to list processes")
    assert not [pid for pid in workers if alive(pid)]


@pytest.mark.slow
def test_sigterm_to_compare_stops_every_parallel_run_and_the_same_command_resumes(tmp_path, overrides, capsys):
    import signal
    import subprocess
    import sys
    import time

    spec = tmp_path / "sweep.toml"
    # Two groups at one value: their tuning runs train side by side (the signal goes as soon as both have
    # logged a step: 100 steps leave them mid-run), then their final runs, in the same two workers.
    write_sweep(spec, overrides, steps=100, values=(1e-3,), seeds=(0,))
    out = tmp_path / "out"
    args = ["compare", str(spec), "--out", str(out), "--jobs", "2", "--no-report"]
    # Its output to files, not pipes: the workers hold its pipes open, so their end would be its end.
    with open(tmp_path / "out.txt", "w") as stdout, open(tmp_path / "err.txt", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "blocklab", *args], stdout=stdout, stderr=stderr)
    deadline = time.time() + 120
    while time.time() < deadline and sum(p.stat().st_size > 0 for p in out.glob("runs/*/metrics.jsonl")) < 2:
        time.sleep(0.05)
    workers = spawned_workers(proc.pid)
    proc.send_signal(signal.SIGTERM)  # to compare alone, as `kill PID` sends it
    assert proc.wait(timeout=120) == 130, (tmp_path / "err.txt").read_text()
    assert workers is None or (len(workers) == 2 and not [w for w in workers if alive(w)])  # none outlives compare
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in out.glob("runs/*/summary.json")}
    assert statuses and set(statuses.values()) <= {"interrupted", "completed"} and "interrupted" in statuses.values()
    sizes = {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")}
    time.sleep(1)
    assert {p: p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")} == sizes  # no worker trains on
    # The same command again, in this process (the interrupted one's state lives only in its files).
    assert main(args) == 0
    final = {p.parent.name: json.loads(p.read_text())["status"] for p in out.glob("runs/*/summary.json")}
    # every run finished: two groups on two tuning seeds, then one final seed each
    assert set(final.values()) <= {"completed", "stalled"} and len(final) == 6
    assert "tuned: sas-p best at train.lr" in capsys.readouterr().err


def test_the_default_jobs_rule(monkeypatch):
    from blocklab.experiments import jobs
    from blocklab.training.config import load_config

    monkeypatch.setattr(jobs, "cpu_count", lambda: 2)
    small, wide = load_config(None, {"model": {"d_model": 64}}), load_config(None, {"model": {"d_model": 512}})
    assert jobs.default_jobs([small] * 8) == 2  # measured 1.2-1.3x faster
    assert jobs.default_jobs([small] * 4) == 1  # measured 0.89x: the workers' start is not paid back
    assert jobs.default_jobs([small] * 7 + [wide]) == 1


def test_runs_the_sweep_no_longer_names_are_kept_and_said(tmp_path, overrides):
    base = dict(overrides, train=dict(overrides["train"], steps=2, checkpoint_every=100, eval_every=2))
    out, seen = tmp_path / "out", []
    run_sweep(
        build_sweep({"name": "e", "base": base, "runs": [{"name": "old", "model.block": "pre-ln"}]}),
        out,
        progress=False,
        log=lambda *a: None,
    )
    run_sweep(
        build_sweep({"name": "e", "base": base, "runs": [{"name": "new", "model.block": "pre-ln"}]}),
        out,
        progress=False,
        log=seen.append,
    )
    assert (out / "runs" / "old" / "summary.json").is_file()  # kept
    assert any("1 run(s)" in s and "(old)" in s and "left out" in s for s in seen)


def test_one_experiment_of_a_sweep_runs_alone(capsys):
    assert main(["compare", "--preset", "warmup-answers", "--experiments", "clm", "--list"]) == 0
    out = capsys.readouterr().out
    assert "clm_admin_lr0.001_s5" in out and "translation_" not in out
    assert main(["compare", "--preset", "warmup-answers", "--experiments", "nope", "--list"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("blocklab compare: error:") and "its experiments: clm, translation" in err
    assert main(["compare", "--preset", "zoo", "--experiments", "clm", "--list"]) == 2
    assert "single experiment" in capsys.readouterr().err
