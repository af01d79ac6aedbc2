"""The gradient-norm figure and table: drawn from runs that logged `grad/` keys, None for runs without."""

from pathlib import Path

import pytest

from blocklab.reporting.gradnorms import grad_norm_ratios, grad_norm_table_md, moments, plot_grad_norms_training, roles
from blocklab.reporting.runs import Run, load_run
from tests.reporting.fakes import write_run

PNG = b"\x89PNG\r\n\x1a\n"


def made_up(name, block, warmup, steps=(1, 10, 20, 30), growth=2.0, stack="L"):
    """A run whose gradient norm at layer l is growth**l at step 1 and flat (1.0) afterwards."""
    rows = []
    for s in steps:
        row = {"step": s, "loss": 5.0}
        for layer in range(3):
            for role in ("attn.v", "mlp.fc2"):
                row[f"grad/{stack}{layer}.{role}"] = growth**layer if s == 1 else 1.0
        rows.append(row)
    rows.insert(2, {"step": 15, "eval_loss": 5.0})  # a row without gradient norms
    return Run(
        path=Path(name),
        name=name,
        label=name,
        rows=rows,
        config={"model": {"block": block}, "train": {"warmup_steps": warmup}},
    )


@pytest.mark.slow
def test_the_figure_of_a_real_run(real_run, tmp_path):
    run = load_run(real_run, "sas-p-real")
    m = moments(run)
    assert m["init"]["step"] == 1 and m["end"]["step"] == 24  # step 1: the gradient at the initial weights
    assert {"attn.q", "attn.k", "attn.v", "mlp.fc1", "mlp.fc2"} <= set(roles([run]))
    out = plot_grad_norms_training([run], tmp_path / "figures" / "grad_norms_training.png")
    assert out == tmp_path / "figures" / "grad_norms_training.png" and out.read_bytes()[:8] == PNG
    table = grad_norm_table_md([run])
    assert table.startswith("| run | block |") and "sas-p-real" in table


def test_no_gradient_norms_no_figure(tmp_path):
    run = load_run(write_run(tmp_path / "old", "pre-ln", 0.01, last_step=50), "old")
    assert not moments(run)
    assert plot_grad_norms_training([run], tmp_path / "g.png") is None and not (tmp_path / "g.png").exists()
    assert grad_norm_table_md([run]) is None and grad_norm_ratios([run]) == []


def test_moments_and_last_over_first_layer_ratios(tmp_path):
    runs = [
        made_up("post-ln w20", "post-ln", 20),
        made_up("post-ln w0", "post-ln", 0, growth=4.0),
        made_up("pre-ln w50", "pre-ln", 50, growth=1.0),
    ]
    assert [r["step"] if r else None for r in moments(runs[0]).values()] == [1, 20, 30]
    assert moments(runs[1])["warmup"] is None  # no warm-up
    assert moments(runs[2])["warmup"] is None  # warm-up not reached
    by_run = {r["run"]: r for r in grad_norm_ratios(runs)}
    assert by_run["post-ln w20"]["init_ratio"] == pytest.approx(4.0) and by_run["post-ln w20"]["layers"] == 3
    assert by_run["post-ln w20"]["warmup_ratio"] == pytest.approx(1.0) == by_run["post-ln w20"]["end_ratio"]
    assert by_run["post-ln w0"]["init_ratio"] == pytest.approx(16.0)
    table = grad_norm_table_md(runs)
    assert "| post-ln w0 | post-ln | 3 | 16 (step 1) | no warm-up | 1 (step 30) |" in table
    assert "not reached" in table
    out = plot_grad_norms_training(runs, tmp_path / "g.png", only=["mlp.fc2"])
    assert out.read_bytes()[:8] == PNG


def test_decoder_blocks_are_their_own_stack(tmp_path):
    run = made_up("translation", "pre-ln", 10, stack="D")
    assert plot_grad_norms_training([run], tmp_path / "enc.png") is None  # no encoder norms logged
    assert roles([run], "D") == ["attn.v", "mlp.fc2"]
    assert plot_grad_norms_training([run], tmp_path / "dec.png", stack="D").is_file()
