"""The report in a real browser: headless Chromium loads report.html from disk (offline) and every
figure decodes and every run is in the table. A sweep of fake runs plus one real training run and
real init probes, as `blocklab compare` lays them out."""

import html
import json
import re
import shutil
import subprocess

import pytest

from blocklab.reporting import generate_report
from tests.reporting.chromium import require
from tests.reporting.fakes import make_fake_sweep

# Injected into a test-only copy of the page: the shipped report.html has no script at all.
CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (i) {
    return {alt: i.alt, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight};
  });
  var rows = Array.prototype.map.call(document.querySelectorAll("table#runs tbody tr"), function (r) {
    return {run: r.getAttribute("data-run"), label: r.cells[0].textContent.trim(),
            status: r.cells[r.cells.length - 1].textContent.trim()};
  });
  var pre = document.createElement("pre");
  pre.id = "check";
  pre.textContent = JSON.stringify({images: images, rows: rows});
  document.body.appendChild(pre);
});
</script>"""


def chromium_dom(chromium: str, page, profile) -> str:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, f"chromium failed ({res.returncode}): {res.stderr[-2000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory, real_run, real_probes):
    root = make_fake_sweep(tmp_path_factory.mktemp("browser") / "sweep")
    shutil.copytree(real_run, root / "runs" / real_run.name, ignore=shutil.ignore_patterns("checkpoints", "tb"))
    shutil.copytree(real_probes, root / "probes")
    return generate_report(root)


@pytest.mark.slow
def test_real_run_row_follows_the_trainer(full_sweep, real_run):
    summary = json.loads((real_run / "summary.json").read_text())
    row = next(r for r in full_sweep.rows if r["run"] == "runs/sas-p-real")
    assert row["label"] == "runs/sas-p-real" and row["status_text"] == "completed"  # not in sweep.json: folder name
    assert row["block"] == "sas-p" and row["params"] == summary["n_params"]
    assert row["tokens_per_s"] == pytest.approx(summary["tokens_per_s"])
    assert row["final_eval_loss"] == pytest.approx(summary["final_eval_loss"])
    assert row["best_eval_loss"] == pytest.approx(summary["best_eval_loss"])
    # 12 logged points (log_every 2 of 24 steps): no smoothing, so the final train loss is the last logged mean
    last = json.loads((real_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 24 and row["final_loss"] == pytest.approx(last["loss"])
    # the real run is completed and the worst one here (loss ~5-6 vs 3.5): it sets the default target
    assert full_sweep.target.value == pytest.approx(last["loss"]) and row["steps_to_target"] <= 24
    md = full_sweep.md_path.read_text()
    assert "## Signal propagation at initialisation" in md and "figures/probes_hidden_norms.png" in md
    assert "figures/gains_sas-p-real.png" in md and "grad fc2_L" in md  # the probes' own summary table


@pytest.mark.slow
def test_report_in_headless_chromium(full_sweep, chromium, tmp_path):
    browser = require(chromium)
    page = full_sweep.html_path.read_text()
    n_img = len(re.findall(r"<img ", page))
    probes = next(s for s in full_sweep.sections if s.id == "init-probes").figures  # as many as blocklab probe draws
    grads = next(s for s in full_sweep.sections if s.id.startswith("grad-norms")).figures  # the real run's grad/ keys
    # losses x2 + eval, probes, gains of sas-p, sas, real, gradient norms per layer
    assert len(probes) >= 4 and len(grads) == 1 and n_img == 3 + len(probes) + 3 + 1
    check = full_sweep.root / "report_check.html"  # next to report.html, as a user would open it
    check.write_text(page.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = chromium_dom(browser, check, tmp_path / "profile")
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found, "the check script did not run: " + dom[-500:]
    result = json.loads(html.unescape(found.group(1)))
    assert len(result["images"]) == n_img
    broken = [i["alt"] for i in result["images"] if not i["complete"] or i["width"] <= 0 or i["height"] <= 0]
    assert not broken, f"figures that did not load: {broken}"
    labels = [r["label"] for r in result["rows"]]
    # by family (classic, then simplified), then block in registry order; one block's runs in the sweep's order
    assert (
        labels == [r.label for r in full_sweep.runs] == ["Post-LN lr=3e-3", "Pre-LN", "SAS", "SAS-P", "runs/sas-p-real"]
    )
    statuses = [r["status"] for r in result["rows"]]
    assert statuses[0] == "diverged at step 95" and statuses[2] == "running/unknown (step 120/200)"
