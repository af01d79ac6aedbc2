"""write_report on a fake sweep: files, sections, Markdown table, a self-contained page; the CLI."""

import re

import pytest

from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.reporting import generate_report, write_report
from blocklab.reporting.report import build_report
from tests.reporting.fakes import make_fake_sweep, write_run

# Each builds a sweep and renders whole reports with their figures: the reporting pipeline's integration.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return generate_report(make_fake_sweep(tmp_path_factory.mktemp("fake") / "sweep"))


@pytest.mark.slow
def test_files_and_markdown(report):
    root = report.root
    assert report.html_path == root / "report.html" and report.md_path == root / "report.md"
    md = report.md_path.read_text()
    assert md.startswith("# blocklab report: fake-sweep") and "Four blocks on a made-up loss curve." in md
    for key in ("Generated", "Machine", "Software", "torch ", "**Expected cost**: a few seconds"):
        assert key in md
    for title in ("## Runs", "## Training loss", "## Evaluation loss", "## Gain trajectories"):
        assert title in md
    assert report.table_md in md
    images = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert set(images) == {
        "figures/loss_vs_step.png",
        "figures/loss_vs_time.png",
        "figures/eval_loss.png",
        "figures/gains_sas-p.png",
        "figures/gains_sas.png",
    }  # gains only for runs with gains
    for rel in images:
        assert (root / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Target loss 3.5: the worst final smoothed training loss among the completed runs" in md
    assert "No trainable gains logged for: Post-LN lr=3e-3, Pre-LN" in md
    assert "SAS: 1" in md  # the skipped partial line is reported
    # The report's training loss is smoothed, summary.json's is not: the column and the note say which.
    assert "| final train loss (smoothed) |" in md and "final_loss is the last logged value, unsmoothed" in md


def test_table_rows(report):
    rows = report.table_md.splitlines()[2:]
    # by family (classic, then simplified), then block in registry order, not in sweep.json's order
    assert [r.split("|")[1].strip() for r in rows] == ["Post-LN lr=3e-3", "Pre-LN", "SAS", "SAS-P"]
    assert [r.split("|")[3].strip() for r in rows] == ["classic", "classic", "simplified", "simplified"]
    assert [r.split("|")[-3].strip() for r in rows] == ["not reached", "170", "110", "200"]
    assert [r.split("|")[-2].strip() for r in rows] == [
        "diverged at step 95",
        "completed",
        "running/unknown (step 120/200)",
        "completed",
    ]
    assert "lr=0.003" in rows[0]  # the settings that differ between runs get a column


def test_html_is_self_contained(report):
    page = report.html_path.read_text()
    imgs = re.findall(r"<img [^>]*>", page)
    assert len(imgs) == 5 and all('src="data:image/png;base64,' in i for i in imgs)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", page)
    assert "<link" not in page and "<script" not in page and "@import" not in page
    assert page.count('<tr class="status-') == 4 and "diverged at step 95" in page


@pytest.mark.slow
def test_report_again_replaces_figures(report, tmp_path):
    root = make_fake_sweep(tmp_path / "s")
    (root / "figures").mkdir()
    (root / "figures" / "gains_old.png").write_bytes(b"stale")
    (root / "figures" / "mine.txt").write_text("kept")
    html, md = write_report(root, target_loss=4.1)
    assert not (root / "figures" / "gains_old.png").exists() and (root / "figures" / "mine.txt").exists()
    assert "Target loss 4.1 (given with --target-loss)" in md.read_text()


def cli(monkeypatch, *argv):
    return main(["report", *argv])


def test_cli_prints_paths_and_table(tmp_path, monkeypatch, capsys):
    run = write_run(tmp_path / "one", "post-ln", 0.01, last_step=100, steps=100)  # no gains: quick
    assert cli(monkeypatch, str(run), "--target-loss", "5.55") == 0
    out = capsys.readouterr().out
    assert f"wrote {run / 'report.html'}" in out and f"wrote {run / 'report.md'}" in out
    assert "| one | post-ln |" in out and "| 50 | completed |" in out  # 6 - 0.01 s <= 5.55 first at step 50


def test_cli_errors_are_one_line(tmp_path, monkeypatch, capsys):
    assert cli(monkeypatch, str(tmp_path / "nope")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "blocklab report: error:" in err and "does not exist" in err
    assert cli(monkeypatch, str(tmp_path)) == 2
    assert "no runs found" in capsys.readouterr().err
    run = write_run(tmp_path / "one", "pre-ln", 0.01, last_step=20, steps=20)
    assert cli(monkeypatch, str(run), "--target-loss", "-1") == 2
    assert "--target-loss" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli(monkeypatch, "--help")
    assert e.value.code == 0 and "self-contained" in capsys.readouterr().out


def test_write_report_raises_user_error(tmp_path):
    with pytest.raises(UserError):
        write_report(tmp_path / "missing")


@pytest.mark.slow
def test_runs_trained_side_by_side_are_not_called_speed_measurements(tmp_path):
    import json as _json

    one = write_run(tmp_path / "a", "pre-ln", 0.01, last_step=100, steps=100)
    two = write_run(tmp_path / "b", "sas-p", 0.01, last_step=100, steps=100)
    assert not any("at a time" in n for n in build_report(tmp_path).notes)
    for run in (one, two):
        summary = _json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(_json.dumps(dict(summary, concurrent_runs=2, threads=1)))
    note = next(n for n in build_report(tmp_path).notes if "at a time" in n)
    assert "trained 2 at a time" in note and "not speed measurements" in note
