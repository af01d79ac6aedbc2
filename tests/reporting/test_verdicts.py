"""DIR/verdicts.json in the report: per experiment the sensitivity figure, the verdict table (each verdict word
with its difference, interval and seeds), the numbers under it, the frontier and the claims; tuning runs and
replaced runs are not report runs; the loss captions compare nothing when the verdicts exist."""

import json
import re
import shutil

import pytest

from blocklab.reporting import generate_report, load_runs
from blocklab.reporting.parts import VERDICT_CAPTION
from tests.reporting.fake_verdicts import REUSED, TUNING, make_tuned_sweep

# Each builds a sweep and renders whole reports with their figures: the reporting pipeline's integration.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = make_tuned_sweep(tmp_path_factory.mktemp("tuned") / "sweep")
    (root / "figures").mkdir()
    (root / "figures" / "sensitivity_gone.png").write_bytes(b"stale")  # an experiment no longer in the sweep
    return generate_report(root)


def section(report, sid):
    return next(s for s in report.sections if s.id == sid)


def rows_by_group(report, exp):
    table = section(report, f"verdicts-{exp}").tables[0]
    return {row[0]: dict(zip(table.columns, row)) for row in table.rows}, table


@pytest.mark.slow
def test_tuning_and_replaced_runs_are_not_report_runs(report):
    runs, _ = load_runs(report.root)
    names = [r.name for r in runs]
    assert not any(f"runs/{t}" in names for t in TUNING) and not any(n.startswith("replaced/") for n in names)
    assert f"runs/{REUSED}" in names  # listed under `runs` too: a tuning run reused as a final seed stays
    assert len(names) == 9 + 1
    md = report.md_path.read_text()
    assert not any(t in report.table_md or t in md for t in TUNING) and "replaced/" not in md
    assert "**Tuning runs**: 4, not in the runs tables" in md


def test_figures_are_drawn_into_each_experiment(report):
    figs = report.root / "figures"
    for name in ("sensitivity_he.png", "sensitivity_xiong.png", "frontier_he.png"):
        assert (figs / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (figs / "frontier_xiong.png").exists() and not (figs / "sensitivity_gone.png").exists()
    md = report.md_path.read_text()
    he, xiong = md.index("## He & Hofmann"), md.index("## Xiong et al.")
    images = re.findall(r"\((figures/[^)]+\.png)\)", md[he:xiong])
    # the verdicts lead the experiment's part: sensitivity, frontier, then the loss figures
    assert images[:3] == ["figures/sensitivity_he.png", "figures/frontier_he.png", "figures/loss_vs_step_he.png"]
    assert "figures/sensitivity_xiong.png" in md[xiong:]
    assert [s.part for s in report.sections if s.id.startswith(("verdicts-", "frontier-", "claims-"))] == [
        "he",
        "he",
        "he",
        "xiong",
        "xiong",
    ]


def test_verdict_table_prints_every_verdict_with_its_numbers(report):
    he, table = rows_by_group(report, "he")
    vs = table.columns[-1]
    assert vs.startswith("against Pre-LN") and he["Pre-LN"][vs] == "reference"
    assert he["SAS"][vs] == (
        "at edge: -0.30, family interval [-0.60, +0.00] (welch, 2 seeds), p_holm 0.012; a best at the grid's edge: "
        "not a verdict"
    )
    assert he["SAS"]["best lr"] == "0.01 (grid edge)" and he["Pre-LN"]["best lr"] == "0.003"
    assert he["SAS-P"][vs] == "one seed: +0.10, no interval (untested, 1 seed), untested (outside the family)"
    assert he["Pre-LN"][table.columns[6]] == "3.55 [2.91, 4.19] (2 completed)"
    assert he["SAS-P"][table.columns[6]].endswith("(1 completed, no interval)")
    assert he["Pre-LN"]["stable range"] == "0.003 only" and he["Pre-LN"]["trainable range"] == "0.001 to 0.01"
    assert he["SAS"]["settings"] == "block sas" and he["Pre-LN"]["sensitivity"] == "0.20"
    assert any(
        "grid's edge, marked (grid edge): SAS at 0.01, the highest value tried. The grid was too narrow" in n
        for n in table.notes
    )
    xiong, table = rows_by_group(report, "xiong")
    failed = xiong["Post-LN, no warm-up"]
    assert failed["settings"] == "block post-ln, warmup_steps 0"
    assert failed["best lr"] == "none (failed at every value); final seeds at 0.001"
    assert (failed["stable range"], failed["trainable range"], failed["sensitivity"]) == ("—", "none", "—")
    assert failed[table.columns[6]] == "— (0 completed, 2 failed)"
    assert failed[table.columns[-1]] == "fails: no difference (seeds 2 vs 2); failed 2/2 against 0/2, p_fail_holm 0.220"
    unresolved = xiong["Post-LN, warm-up 60"][table.columns[-1]]
    assert unresolved.startswith("unresolved: +0.05, family interval [-0.28, +0.38]") and "mde80 0.42" in unresolved
    assert any("No value completed on every tuning seed" in n and "Post-LN, no warm-up" in n for n in table.notes)
    for word in ("better", "worse", "equivalent", "unresolved", "at edge"):  # never a word without its numbers
        for cell in re.findall(rf"{word}: [^|<]*", report.md_path.read_text() + report.html_path.read_text()):
            assert re.match(rf"{word}: [+-]\d", cell) and "interval" in cell and "seeds" in cell


def test_tables_are_html_tables_and_markdown_pipes(report):
    page = report.html_path.read_text()
    assert '<table id="verdict-table-he">' in page and '<table id="frontier-table-he">' in page
    assert "| group |" not in page and "<td>reference</td>" in page
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids))  # a table's id is not its section's
    md = report.md_path.read_text()
    assert "| group | settings | best lr | stable range |" in md
    assert "| SAS | 2 | 9.8 C^-0.035 | 1.80x [1.20, 2.60] |" in md
    assert "| Pre-LN | 2 | 10 C^-0.035 | 1 (reference) |" in md


def test_numbers_paragraph(report):
    _, table = rows_by_group(report, "he")
    numbers = table.notes[-1]
    assert "Noise floor: 0.07, the standard deviation of the reference (Pre-LN) over its completed" in numbers
    assert "Family: 3 tests of the sweep's primary metric" in numbers and "level 0.05/3" in numbers
    assert "Eval noise: 0.004" in numbers and "0.06 of the spread over seeds: below a third" in numbers
    assert "Tuning runs reused as final seeds: no" in numbers
    _, table = rows_by_group(report, "xiong")
    assert "Eval noise: not recorded." in table.notes[-1] and "reused as final seeds: yes" in table.notes[-1]


def test_claims_with_their_status_where_they_belong(report):
    assert section(report, "claims-he").items == [
        "He & Hofmann 2023 — simplified blocks train as fast per step as Pre-LN: holds. SAS's interval against "
        "Pre-LN ends at -0.15, below +0.1."
    ]
    assert (
        section(report, "claims-xiong").items[0].startswith("Xiong et al. 2020 — Post-LN needs warm-up: inconclusive.")
    )
    last = report.sections[-1]
    assert (
        last.id == "claims"
        and last.part is None
        and last.items
        == [
            "Wortsman et al. 2023 — qk-norm widens the stable range: does not hold. no experiment of this sweep "
            "tests it."
        ]
    )
    md = report.md_path.read_text()
    assert md.index("- He & Hofmann 2023 — simplified") < md.index("## Xiong et al.") < md.index("\n## Claims\n")


@pytest.mark.slow
def test_loss_captions_leave_the_verdicts_to_the_table(report, tmp_path):
    captions = {f.path.name: f.caption for s in report.sections for f in s.figures}
    for name in ("loss_vs_step_he.png", "loss_vs_time_he.png", "eval_loss_xiong.png"):
        assert captions[name] == VERDICT_CAPTION
    assert not any("mean over seeds)" in c or "tokens/s" in c for c in captions.values())
    root = tmp_path / "sweep"
    shutil.copytree(report.root, root)
    (root / "verdicts.json").unlink()
    plain = generate_report(root)
    captions = {f.path.name: f.caption for s in plain.sections for f in s.figures}
    assert captions["eval_loss_he.png"].startswith("Final evaluation loss (mean over seeds)")
    assert "tokens/s" in captions["loss_vs_time_xiong.png"] and VERDICT_CAPTION not in captions.values()
    assert not any(s.id.startswith(("verdicts-", "claims")) for s in plain.sections)
    assert not (root / "figures" / "sensitivity_he.png").exists()


@pytest.mark.slow
def test_unreadable_verdicts_are_a_note(tmp_path):
    root = make_tuned_sweep(tmp_path / "sweep", with_verdicts=False)
    (root / "verdicts.json").write_text('{"sweep": "tuned", "experiments": {')  # half-written
    report = generate_report(root)
    assert any(n.startswith("verdicts.json could not be read (JSONDecodeError") for n in report.notes)
    assert "verdicts.json could not be read" in report.md_path.read_text()
    captions = [f.caption for s in report.sections for f in s.figures if f.path.name.startswith("loss_vs_step")]
    assert captions and all(c == VERDICT_CAPTION for c in captions)
    data = json.loads(json.dumps({"experiments": {"he": {"groups": {"a": {"curve": "nonsense"}}}}}))
    (root / "verdicts.json").write_text(json.dumps(data))
    report = generate_report(root)  # an entry it cannot draw: a paragraph, not a crash
    assert "could not be drawn" in section(report, "verdicts-he").paragraphs[0]
