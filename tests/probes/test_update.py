"""DeepNet's model update probe: the logits' change after one first Adam step, against depth."""

import pytest
import torch

from blocklab import ModelConfig, build_model
from blocklab.probes.init_probes import random_batches, run_init_probes
from blocklab.probes.measure import UPDATE_LR, model_update, probe_batch
from blocklab.probes.plots import plot_model_update


def _model(block="post-ln", L=2, **kw):
    torch.manual_seed(0)
    return build_model(
        ModelConfig(block=block, n_layers=L, vocab_size=64, d_model=32, n_heads=4, d_ff=64, max_seq_len=16, **kw)
    )


def test_model_update_is_the_first_adam_step_and_restores_the_weights():
    model = _model()
    ids, labels = random_batches(64, 16, 4)(0)
    out = model(ids, labels=labels)
    out.loss.backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    got = model_update(model, ids, None, out.logits.detach())
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    # the same step taken by torch's Adam: its first update is lr * sign(g) (up to eps)
    opt = torch.optim.Adam(model.parameters(), lr=UPDATE_LR, eps=1e-30)
    opt.step()
    with torch.no_grad():
        want = (model(ids).logits - out.logits).pow(2).mean().sqrt().item()
    assert got == torch.tensor(want).item() or abs(got - want) <= 1e-6 * max(want, 1e-12)
    assert got > 0


def test_probe_batch_reports_the_update_and_rezero_barely_moves():
    ids, labels = random_batches(64, 16, 4)(0)
    moved = probe_batch(_model("pre-ln"), ids, labels)["model_update"]
    still = probe_batch(_model("rezero"), ids, labels)["model_update"]
    assert moved > 10 * still > 0  # ReZero's blocks are the identity: only embeddings and a move


@pytest.mark.slow
def test_deepnorm_carries_the_bounded_reference_and_grows_slower_than_post_ln(tmp_path):
    # d=64, 2 to 32 layers: slopes 0.50 (Post-LN) and 0.21 (DeepNorm) measured with `blocklab probe`
    result = run_init_probes(
        ["post-ln", "deepnorm", "pre-ln"],
        [2, 32],
        random_batches(512, 64, 8),
        model=dict(vocab_size=512, d_model=64, n_heads=4, d_ff=256),
        seeds=2,
        n_batches=1,
        progress=False,
    )
    upd = result["model_update_vs_depth"]
    assert upd["deepnorm"]["reference"]["slope"] == 0.0 and "DeepNet" in upd["deepnorm"]["reference"]["source"]
    assert upd["post-ln"]["reference"] is None and upd["pre-ln"]["reference"] is None
    # DeepNet's Fig. 3 at this size: Post-LN's update grows with depth, DeepNorm's far less
    assert upd["post-ln"]["slope"] > upd["deepnorm"]["slope"] + 0.15
    assert plot_model_update(result, tmp_path / "u.png") and (tmp_path / "u.png").stat().st_size > 0


def test_model_update_keeps_mode_and_random_state_and_follows_ngpt_back_to_the_sphere():
    model = _model("pre-ln", dropout=0.1).train()
    ids, labels = random_batches(64, 16, 4)(0)
    model.eval()
    out = model(ids, labels=labels)
    model.train()
    out.loss.backward()
    rng = torch.get_rng_state()
    first = model_update(model, ids, None, out.logits.detach())
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert first == model_update(model, ids, None, out.logits.detach())  # no dropout noise in the measure
    ngpt = _model("ngpt")
    out = ngpt(ids, labels=labels)
    out.loss.backward()
    before = {n: p.detach().clone() for n, p in ngpt.named_parameters()}
    assert model_update(ngpt, ids, None, out.logits.detach()) > 0
    for n, p in ngpt.named_parameters():
        assert torch.equal(p, before[n]), n
