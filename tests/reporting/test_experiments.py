"""A sweep that holds several experiments (sweep.json's `experiments` and each run's `experiment` tag) gets one
part per experiment: its own section, settings, table, loss figures and target against its own reference run.
The settings every run shares are shown once; the tables show only what differs between their runs."""

import json
import re

import pytest

from blocklab.reporting import figures as F
from blocklab.reporting import generate_report
from tests.reporting.fakes import make_experiment_sweep, make_fake_sweep, write_run

# Each builds a sweep and renders whole reports with their figures: the reporting pipeline's integration.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return generate_report(make_experiment_sweep(tmp_path_factory.mktemp("exp") / "sweep"))


@pytest.mark.slow
def test_one_part_per_experiment_with_its_own_target(report):
    assert report.experiments and [p.id for p in report.parts] == ["he", "xiong"]
    he, xiong = report.parts
    assert [r.name for r in he.runs] == ["runs/pre-ln", "runs/sas", "runs/sas-p"]
    # each target is the final loss of the experiment's own reference run, not the sweep's worst (4.4)
    assert he.target.source == xiong.target.source == "reference"
    assert he.target.value == pytest.approx(3.0) and xiong.target.value == pytest.approx(3.6)
    assert [r["steps_to_target"] for r in he.rows] == [200, 180, None]
    assert {r["run"]: r["steps_to_target"] for r in xiong.rows}["runs/xiong_pre-ln_wu0"] == 160
    assert report.target.value is None and "own target" in report.target.note


def test_two_sections_with_two_loss_figures_each(report):
    md = report.md_path.read_text()
    he_at, xiong_at, gains_at = md.index("## He & Hofmann"), md.index("## Xiong et al."), md.index("## Gain traj")
    assert he_at < xiong_at < gains_at
    for pid, (lo, hi) in {"he": (he_at, xiong_at), "xiong": (xiong_at, gains_at)}.items():
        part = md[lo:hi]
        assert "### Runs" in part and "### Training loss" in part and "### Evaluation loss" in part
        images = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", part)
        assert images == [
            f"figures/loss_vs_step_{pid}.png",
            f"figures/loss_vs_time_{pid}.png",
            f"figures/eval_loss_{pid}.png",
        ]
        for rel in images:
            assert (report.root / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Target loss 3: the final smoothed training loss of the reference run PRE-LN" in md[he_at:xiong_at]
    assert "Target loss 3.6: the final smoothed training loss of the reference run pre-ln wu60" in md[xiong_at:]
    assert not (report.root / "figures" / "loss_vs_step.png").exists()
    page = report.html_path.read_text()
    assert '<table id="runs-he">' in page and '<table id="runs-xiong">' in page and 'id="runs"' not in page
    assert '<h3 id="training-loss-xiong">' in page and page.count("<img ") == 3 * 2 + 2  # + gains of sas, sas-p


@pytest.mark.slow
def test_each_loss_figure_draws_its_own_target(tmp_path, monkeypatch):
    drawn = {}
    original = F.plot_train_loss

    def spy(runs, path, x, target):
        drawn[path.name] = (target.value, sorted(r.name for r in runs))
        return original(runs, path, x, target)

    monkeypatch.setattr(F, "plot_train_loss", spy)
    generate_report(make_experiment_sweep(tmp_path / "sweep"))
    assert set(drawn) == {
        "loss_vs_step_he.png",
        "loss_vs_time_he.png",
        "loss_vs_step_xiong.png",
        "loss_vs_time_xiong.png",
    }
    assert drawn["loss_vs_step_he.png"] == (pytest.approx(3.0), ["runs/pre-ln", "runs/sas", "runs/sas-p"])
    value, runs = drawn["loss_vs_time_xiong.png"]
    assert value == pytest.approx(3.6) and len(runs) == 4 and all("xiong" in r for r in runs)


def test_sentences_compare_within_an_experiment(report):
    captions = {f.path.name: f.caption for s in report.sections for f in s.figures}
    assert "SAS 2.60 against Pre-LN's 3.00" in captions["loss_vs_step_he.png"]
    assert "warm-up" not in captions["loss_vs_step_he.png"]
    xiong = captions["loss_vs_step_xiong.png"]
    assert "Post-LN 4.40 without warm-up against 4.00 with 60 steps" in xiong and "SAS" not in xiong


def test_shared_settings_once_and_only_differences_in_the_tables(report):
    # every run: d_model 32; He's runs: lr 3e-3 and warm-up 10; Xiong's: lr 1e-3, warm-up 60 or 0
    assert report.shared[("model", "d_model")] == 32 and ("train", "lr") not in report.shared
    he, xiong = report.parts
    assert he.shared == {("train", "lr"): 0.003, ("train", "warmup_steps"): 10}
    assert xiong.shared == {("train", "lr"): 0.001}
    assert all(r["settings"] == "" for r in he.rows)
    assert [r["settings"] for r in xiong.rows] == ["warmup_steps=60", "warmup_steps=0"] * 2
    md = report.md_path.read_text()
    assert md.count("d_model=32") == 1 and "## Settings shared by every run" in md
    assert "d_model" not in report.table_md and "lr=" not in report.table_md
    assert "- **train**: lr=0.003, warmup_steps=10" in md


@pytest.mark.slow
def test_a_sweep_without_experiments_renders_as_before(tmp_path):
    report = generate_report(make_fake_sweep(tmp_path / "sweep"))
    assert not report.experiments and [p.id for p in report.parts] == [""]
    assert report.target is report.parts[0].target and report.table_md == report.parts[0].table_md
    md = report.md_path.read_text()
    assert "\n### " not in md and md.index("## Runs") < md.index("## Training loss")
    assert [s.id for s in report.sections][:2] == ["training-loss", "eval-loss"]
    assert '<table id="runs">' in report.html_path.read_text()
    # the settings all four runs share are listed once, not in the table; three runs have lr 1e-3, listed
    # once as what most runs have, and the table names the lr of the one run that differs only
    assert report.shared[("model", "d_model")] == 32 and ("train", "lr") not in report.shared
    assert report.parts[0].usual == {("train", "lr"): 0.001}
    assert [r["settings"] for r in report.rows] == ["lr=0.003", "", "", ""]
    assert "d_model" not in report.table_md and "lr=0.001" not in report.table_md
    assert "- **most runs**: lr=0.001 (the settings column" in md


@pytest.mark.slow
def test_runs_outside_every_experiment_get_their_own_part(tmp_path):
    root = make_experiment_sweep(tmp_path / "sweep")
    write_run(root / "runs" / "extra", "parallel", 0.01, last_step=200)  # on disk, not in sweep.json
    report = generate_report(root)
    assert [p.title for p in report.parts] == ["He & Hofmann", "Xiong et al.", "Other runs"]
    assert [r.name for r in report.parts[2].runs] == ["runs/extra"]
    assert report.parts[2].target.source == "worst-completed"
    assert (root / "figures" / "loss_vs_step__other.png").is_file()


@pytest.mark.slow
def test_unreadable_experiments_fall_back_to_one_part(tmp_path):
    root = make_experiment_sweep(tmp_path / "sweep")
    sweep = json.loads((root / "sweep.json").read_text())
    (root / "sweep.json").write_text(json.dumps(dict(sweep, experiments=["he", "xiong"])))
    report = generate_report(root)
    assert not report.experiments and len(report.parts[0].runs) == 7
