"""The sentences under the probe and gain figures come from the numbers those figures draw."""

import json

import pytest

from blocklab.reporting import load_runs
from blocklab.reporting.claims import gains_sentence, probe_sentences


@pytest.mark.slow
def test_probe_sentences_quote_probes_json(real_probes):
    result = json.loads((real_probes / "probes.json").read_text())
    s = probe_sentences(result)
    assert set(s) == {"hidden_norms", "grad_norms", "last_ffn_grad", "cosine_similarity"}
    d = result["settings"]["model"]["d_model"]
    pre = result["results"]["pre-ln"]
    first, last = pre["1"]["hidden_sq_norm"]["mean"][-1] / d, pre["2"]["hidden_sq_norm"]["mean"][-1] / d
    assert f"Pre-LN {first:.2f} -> {last:.2f}" in s["hidden_norms"]
    assert f"SAS-P {result['results']['sas-p']['2']['cosine_similarity']['mean'][-1]:.2f}" in s["cosine_similarity"]
    slope = result["last_ffn_vs_depth"]["pre-ln"]["slope"]
    assert f"Pre-LN {slope:+.2f}" in s["last_ffn_grad"]
    assert probe_sentences({"results": {}}) == {}  # an unreadable result: no sentence rather than an error


def test_gain_sentence_quotes_the_first_and_last_logged_gains(real_run):
    run = load_runs(real_run)[0][0]
    rows = [r for r in run.rows if any(k.startswith("gain/") for k in r)]
    beta_ff = [k for k in rows[0] if k.endswith(".beta_ff")]
    mean = lambda row: sum(row[k] for k in beta_ff) / len(beta_ff)  # noqa: E731
    s = gains_sentence(run)
    assert f"step {rows[0]['step']} to {rows[-1]['step']}" in s
    assert f"beta_ff {mean(rows[0]):.2f} -> {mean(rows[-1]):.2f}" in s


@pytest.mark.slow
def test_report_captions_carry_the_sentences(tmp_path, real_run, real_probes):
    import shutil

    from blocklab.reporting import generate_report

    root = tmp_path / "sweep"
    shutil.copytree(real_run, root / "runs" / "r", ignore=shutil.ignore_patterns("checkpoints", "tb"))
    shutil.copytree(real_probes, root / "probes")
    report = generate_report(root)
    captions = {f.path.name: f.caption for sec in report.sections for f in sec.figures}
    assert "|x_L|^2/d from L=1 to L=2: Pre-LN" in captions["probes_hidden_norms.png"]
    assert "Mean over layers and heads" in captions["gains_r.png"]
    assert captions["loss_vs_step.png"].startswith("Final training loss (one seed each): lowest")


@pytest.mark.slow
def test_report_draws_its_own_figures_before_waiting_for_the_probes(tmp_path, real_run, real_probes):
    """compare computes the probes while the report draws (experiments/probe_job.py): the report reads DIR/probes
    only after `probes_ready` returns, and the gains (its own figures) are drawn by then, in the same order."""
    import shutil

    from blocklab.reporting import generate_report

    root = tmp_path / "sweep"
    shutil.copytree(real_run, root / "runs" / "r", ignore=shutil.ignore_patterns("checkpoints", "tb"))
    drawn_before = []

    def ready():
        drawn_before.extend(p.name for p in (root / "figures").glob("*.png"))
        shutil.copytree(real_probes, root / "probes")  # the probes arrive only now

    report = generate_report(root, probes_ready=ready)
    assert "gains_r.png" in drawn_before and not any(n.startswith("probes_") for n in drawn_before)
    ids = [sec.id for sec in report.sections]
    assert ids.index("init-probes") < ids.index("gains")  # the page keeps its order
    captions = {f.path.name: f.caption for sec in report.sections for f in sec.figures}
    assert "|x_L|^2/d from L=1 to L=2: Pre-LN" in captions["probes_hidden_norms.png"]
