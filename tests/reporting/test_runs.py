"""Finding and reading run folders; the numbers of the table (smoothing, target, steps to target)."""

import json
import shutil

import numpy as np
import pytest

from blocklab.errors import UserError
from blocklab.reporting import choose_target, find_run_dirs, load_runs, smooth, steps_to_target
from blocklab.reporting.analysis import markdown_table, run_row, smoothing_window
from tests.reporting.fakes import make_fake_sweep, write_run


@pytest.fixture
def sweep(tmp_path):
    return make_fake_sweep(tmp_path / "sweep")


def by_label(runs):
    return {r.label: r for r in runs}


def test_sweep_json_gives_order_labels_and_statuses(sweep):
    runs, meta = load_runs(sweep)
    assert meta["name"] == "fake-sweep"
    assert [r.label for r in runs] == ["SAS-P", "Pre-LN", "Post-LN lr=3e-3", "SAS"]
    assert [r.name for r in runs] == ["runs/sas-p", "runs/pre-ln", "runs/post-ln", "runs/sas"]
    assert [r.status for r in runs] == ["completed", "completed", "diverged", "running/unknown"]
    sas = by_label(runs)["SAS"]
    assert sas.summary is None and sas.skipped_lines == 1 and sas.rows[-1]["step"] == 120  # partial line skipped
    assert sas.block == "sas" and sas.total_steps == 200  # from config.toml


def test_without_sweep_json_labels_are_folder_names(tmp_path):
    root = make_fake_sweep(tmp_path / "s", with_sweep_json=False)
    runs, meta = load_runs(root)
    assert meta == {} and [r.label for r in runs] == ["runs/post-ln", "runs/pre-ln", "runs/sas", "runs/sas-p"]


def test_run_dirs_found_at_any_depth_up_to_three(tmp_path):
    write_run(tmp_path / "a" / "b" / "c", "pre-ln", 0.01, last_step=50, steps=50)
    write_run(tmp_path / "x", "sas", 0.01, last_step=50, steps=50, status=None)
    write_run(tmp_path / "1" / "2" / "3" / "4", "sas", 0.01, last_step=50, steps=50)  # too deep
    assert [p.relative_to(tmp_path).as_posix() for p in find_run_dirs(tmp_path)] == ["a/b/c", "x"]
    single, _ = load_runs(tmp_path / "x")  # DIR may be one run folder
    assert [(r.name, r.label, r.status) for r in single] == [(".", "x", "running/unknown")]


def test_sweep_json_run_without_folder_is_listed_as_not_started(sweep):
    meta = json.loads((sweep / "sweep.json").read_text())
    meta["runs"].append({"name": "parallel", "label": "Parallel"})
    (sweep / "sweep.json").write_text(json.dumps(meta))
    runs, _ = load_runs(sweep)
    assert runs[-1].label == "Parallel" and runs[-1].status == "not started" and not runs[-1].exists


def test_bad_dirs_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_runs(tmp_path / "missing")
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    with pytest.raises(UserError, match="no runs found"):
        load_runs(tmp_path / "empty")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        load_runs(tmp_path / "f.txt")


def test_tuning_runs_and_replaced_runs_are_not_report_runs(sweep):
    """sweep.json's `tuning` runs reach the report through verdicts.json, and compare --rerun-changed moves old runs
    to DIR/replaced/: neither is a report run, unless `runs` lists it too (a tuning run reused as a final seed)."""
    for name in ("pre-ln_lr0.01_s3", "sas_lr0.01_s3"):
        write_run(sweep / "runs" / name, "pre-ln", 0.01, last_step=50, steps=50, seed=3)
    write_run(sweep / "replaced" / "runs" / "pre-ln", "pre-ln", 0.001, last_step=50, steps=50)  # sorts first
    meta = json.loads((sweep / "sweep.json").read_text())
    meta["tuning"] = [
        {"name": n, "dir": f"runs/{n}", "value": 0.01, "seed": 3} for n in ("pre-ln_lr0.01_s3", "sas_lr0.01_s3")
    ]
    meta["runs"].append({"name": "sas_lr0.01_s3", "dir": "runs/sas_lr0.01_s3", "label": "SAS reused"})
    (sweep / "sweep.json").write_text(json.dumps(meta))
    runs, _ = load_runs(sweep)
    assert [r.name for r in runs] == ["runs/sas-p", "runs/pre-ln", "runs/post-ln", "runs/sas", "runs/sas_lr0.01_s3"]
    assert by_label(runs)["Pre-LN"].summary.final_loss == pytest.approx(3.0)  # not the replaced run's 5.95
    meta["runs"] = []
    (sweep / "sweep.json").write_text(json.dumps(meta))
    for d in ("sas-p", "pre-ln", "post-ln", "sas"):
        shutil.rmtree(sweep / "runs" / d)
    with pytest.raises(UserError, match="no runs to report"):
        load_runs(sweep)


def test_runs_an_edited_sweep_no_longer_names_are_left_out(sweep):
    """A run left under runs/ by an older version of the sweep (compare lists every run it has, tuning ones
    included) is neither reused nor reported; without `tuning` (an older sweep.json) every run found counts."""
    write_run(sweep / "runs" / "pre-ln_s0", "pre-ln", 0.01, last_step=50, steps=50)
    assert "runs/pre-ln_s0" in [r.name for r in load_runs(sweep)[0]]
    meta = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweep.json").write_text(json.dumps(dict(meta, tuning=[])))
    assert "runs/pre-ln_s0" not in [r.name for r in load_runs(sweep)[0]]


def test_default_target_is_worst_completed_final_loss(sweep):
    runs, _ = load_runs(sweep)
    target = choose_target(runs)
    # completed finals: pre-ln 6 - 0.015*200 = 3.0, sas-p 6 - 0.0125*200 = 3.5 -> 3.5 (the diverged and
    # the running run do not count, even though the running one is at 3.12)
    assert target.source == "worst-completed" and target.value == pytest.approx(3.5)
    assert "worst final smoothed training loss" in target.note and "SAS-P" in target.note
    steps = {r.label: steps_to_target(r, target.value) for r in runs}
    # 6 - 0.015 s <= 3.5 first at logged step 170; sas-p exactly at its end; sas (running) at 110; post-ln never
    assert steps == {"SAS-P": 200, "Pre-LN": 170, "SAS": 110, "Post-LN lr=3e-3": None}


def test_reference_run_sets_the_target(sweep):
    runs, _ = load_runs(sweep)
    target = choose_target(runs, reference="Pre-LN")
    # Pre-LN's final smoothed loss is 6 - 0.015*200 = 3.0; SAS-P (3.5 at its end) never matches it
    assert target.source == "reference" and target.value == pytest.approx(3.0) and "Pre-LN" in target.note
    assert steps_to_target(runs[[r.label for r in runs].index("SAS-P")], target.value) is None
    # a reference that did not complete falls back to the default
    assert choose_target(runs, reference="Post-LN lr=3e-3").source == "worst-completed"


def test_given_target_and_table_rows(sweep):
    runs, _ = load_runs(sweep)
    target = choose_target(runs, 4.1)
    assert target.source == "given" and target.value == 4.1
    rows = {r.label: run_row(r, target) for r in runs}
    assert {k: v["steps_to_target"] for k, v in rows.items()} == {
        "SAS-P": 160,
        "Pre-LN": 130,
        "Post-LN lr=3e-3": None,
        "SAS": 80,
    }
    pre = rows["Pre-LN"]
    assert pre["block"] == "pre-ln" and pre["params"] == 1_234_567 and pre["tokens_per_s"] == 2000.0
    assert pre["final_loss"] == pytest.approx(3.0) and pre["final_eval_loss"] == pytest.approx(3.1)
    assert pre["best_eval_loss"] == pytest.approx(3.1) and pre["status_text"] == "completed"
    assert rows["Post-LN lr=3e-3"]["status_text"] == "diverged at step 95"
    sas = rows["SAS"]  # no summary: numbers from metrics.jsonl and config.toml
    assert sas["status_text"] == "running/unknown (step 120/200)"
    assert sas["final_loss"] == pytest.approx(6 - 0.024 * 120) and sas["tokens_per_s"] == 1000.0
    assert sas["final_eval_loss"] == pytest.approx(6.1 - 0.024 * 100) and sas["params"] > 0
    table = markdown_table(list(rows.values())).splitlines()
    assert table[0].startswith("| run | block |") and "steps to target" in table[0] and len(table) == 6
    assert "| Pre-LN | pre-ln |" in table[3] and "| 1.23M | 2,000 | 3.000 | 3.100 | 3.100 | 130 |" in table[3]
    assert "not reached | diverged at step 95 |" in table[4]


def test_smoothing_is_a_light_trailing_moving_average(tmp_path):
    assert smoothing_window(19) == 1 and smoothing_window(200) == 10 and smoothing_window(10_000) == 50
    y = np.arange(10, dtype=float)
    assert np.allclose(smooth(y, 3), [0, 0.5, 1, 2, 3, 4, 5, 6, 7, 8]) and np.array_equal(smooth(y, 1), y)
    # 400 logged points of a noisy curve: window 20; the final smoothed loss is the mean of the last 20
    rng = np.random.default_rng(0)
    run = write_run(tmp_path / "r", "pre-ln", 0.0, last_step=400, steps=400, log_every=1)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = 4 + rng.normal(0, 0.3, len(rows))
    for r, v in zip(rows, losses):
        r["loss"] = float(v)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (r,), _ = load_runs(run)
    row = run_row(r, choose_target([r]))
    assert row["final_loss"] == pytest.approx(losses[-20:].mean())
    assert row["steps_to_target"] <= 400  # the only completed run reaches its own final smoothed loss
