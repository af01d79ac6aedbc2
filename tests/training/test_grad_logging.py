"""Per-layer gradient norms in metrics.jsonl: on the logged steps and step 1 only, true (unscaled,
unclipped) gradients, and the update unchanged."""

import json
import math

import pytest
import torch

import blocklab.training.loop as loop_module
from blocklab.training import Trainer, load_config, train

ROLES = ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2")


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def grads(row):
    return {k: v for k, v in row.items() if k.startswith("grad/")}


@pytest.fixture
def small(overrides):
    overrides["model"]["block"] = "post-ln"
    overrides["train"].update(steps=10, log_every=4, eval_every=5, checkpoint_every=10)
    return overrides


def counted(monkeypatch):
    calls = []
    real = loop_module.layer_grad_norms

    def counting(model):
        calls.append(model)
        return real(model)

    monkeypatch.setattr(loop_module, "layer_grad_norms", counting)
    return calls


def test_grad_norms_at_exactly_the_logged_steps(tmp_path, small, monkeypatch):
    calls = counted(monkeypatch)
    train(load_config(None, small), tmp_path / "r", progress=False, log=lambda *a, **k: None)
    got = rows(tmp_path / "r")
    # log_every 4 of 10 steps: 4, 8 and the last; eval at 5 and 10; step 1 for the gradients at init
    assert [r["step"] for r in got] == [1, 4, 5, 8, 10]
    assert [r["step"] for r in got if grads(r)] == [1, 4, 8, 10]
    assert len(calls) == 4  # the other steps measure nothing
    assert set(got[0]) == {"step"} | set(grads(got[0]))  # step 1 is not logged: a row of its own
    assert "loss" in got[1] and "eval_loss" in got[2] and not grads(got[2])
    want = {f"grad/L{i}.{r}" for i in range(2) for r in ROLES}
    for r in got:
        if grads(r):
            assert set(grads(r)) == want
            assert all(math.isfinite(v) and v > 0 for v in grads(r).values())
    assert got[0]["grad/L0.mlp.fc2"] != got[-1]["grad/L0.mlp.fc2"]


def test_log_every_one_measures_every_step_in_its_row(tmp_path, small, monkeypatch):
    calls = counted(monkeypatch)
    small["train"].update(steps=3, log_every=1)
    train(load_config(None, small), tmp_path / "r", progress=False, log=lambda *a, **k: None)
    got = rows(tmp_path / "r")
    assert [r["step"] for r in got] == [1, 2, 3] and len(calls) == 3
    assert all("loss" in r and "grad/L1.mlp.fc2" in r for r in got)


def test_norms_are_unclipped_and_the_update_unchanged(tmp_path, small):
    """grad_clip 1e-6 clips every update, yet the logged norms are the gradients before clipping: at step 1
    (the same initial weights and batch) they equal those of a run without clipping."""
    clipped = dict(small, train=dict(small["train"], grad_clip=1e-6))
    free = dict(small, train=dict(small["train"], grad_clip=0.0))
    train(load_config(None, clipped), tmp_path / "clipped", progress=False, log=lambda *a, **k: None)
    train(load_config(None, free), tmp_path / "free", progress=False, log=lambda *a, **k: None)
    a, b = rows(tmp_path / "clipped"), rows(tmp_path / "free")
    assert grads(a[0]) == pytest.approx(grads(b[0]), rel=1e-6)
    # after clipping, the norm over all the weights would be <= 1e-6, so over the block weights too
    assert all(math.sqrt(sum(v * v for v in grads(r).values())) > 1e-3 for r in a if grads(r))
    assert a[-1]["loss"] != b[-1]["loss"]  # the clipping did act on the updates


def test_norms_are_unscaled_under_a_grad_scaler(tmp_path, small, monkeypatch):
    """With a GradScaler (fp16 on CUDA; here one on the CPU) the norms are of the unscaled gradients, and
    `unscale_` runs once per step (a second call would raise) with or without clipping."""
    small["train"].update(steps=4, log_every=2)
    cfg = load_config(None, small)
    plain = Trainer(cfg, tmp_path / "plain", progress=False, log=lambda *a, **k: None)
    plain.run()
    for clip in (0.0, 1.0):
        cfg = load_config(None, dict(small, train=dict(small["train"], grad_clip=clip)))
        t = Trainer(cfg, tmp_path / f"scaled{clip}", progress=False, log=lambda *a, **k: None)
        t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        t.run()
        got, want = rows(tmp_path / f"scaled{clip}"), rows(tmp_path / "plain")
        assert [r["step"] for r in got] == [1, 2, 4]
        assert grads(got[0]) == pytest.approx(grads(want[0]), rel=1e-5)
        assert t.scaler.get_scale() == 2.0**10  # no inf found, no step skipped
