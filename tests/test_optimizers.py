"""Muon with AdamW as one optimizer (blocklab/optimizers.py): a step is torch.optim.Muon's and
torch.optim.AdamW's on the same split of the parameters, bit for bit on the CPU, and its state dict carries a
run on bit for bit."""

import copy

import pytest
import torch

from blocklab import build_model
from blocklab.optimizers import MuonAdamW
from blocklab.training.config import TrainConfig
from blocklab.training.optim import make_optimizer, set_lr
from tests.helpers import randomize, small_cfg

CFG = TrainConfig(optimizer="muon", lr=2e-2, weight_decay=0.1, beta1=0.8, beta2=0.95)


def batch(step: int):
    g = torch.Generator().manual_seed(step)
    return torch.randint(0, 97, (4, 24), generator=g)


def train(model, optimizers, steps: range, lr=None):
    for step in steps:
        ids = batch(step)
        model(ids, labels=ids).loss.backward()
        for opt in optimizers:
            if lr is not None:
                set_lr(opt, lr(step))
            opt.step()
        model.after_optimizer_step()  # nGPT's re-normalisation, as the trainer runs it
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)


def by_hand(model):
    """torch's Muon on the blocks' 2-D parameters, named here without blocklab's split, and torch's AdamW
    (fused, as the trainer builds it) on the rest: the embeddings and head decayed, the < 2-D ones not."""
    hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if not (n.startswith("blocks.") and p.dim() == 2)]
    muon = torch.optim.Muon(hidden, lr=CFG.lr, weight_decay=CFG.weight_decay, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW(
        [
            {"params": [p for p in rest if p.dim() >= 2], "weight_decay": CFG.weight_decay},
            {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=CFG.lr,
        betas=(CFG.beta1, CFG.beta2),
        fused=True,
    )
    return [muon, adamw]


def schedule(step):
    return CFG.lr * (step + 1) / 4  # a rate that moves each step: both parts must follow it


@pytest.mark.parametrize("block", ["pre-ln", "sas-p", "ngpt"])
def test_a_muon_step_is_torch_muon_and_adamw_on_the_split_by_hand(block):
    model = randomize(build_model(small_cfg(block)), scale=0.05)
    ref = copy.deepcopy(model)
    opt = make_optimizer(model, CFG)
    assert isinstance(opt, MuonAdamW) and opt.muon.param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    train(model, [opt], range(4), schedule)
    train(ref, by_hand(ref), range(4), schedule)
    start = build_model(small_cfg(block))
    for (name, p), q, p0 in zip(model.named_parameters(), ref.parameters(), start.parameters()):
        assert torch.equal(p, q), name
        assert not torch.equal(p, p0), name  # every parameter moved: both parts stepped
    assert opt.param_groups[0]["lr"] == opt.param_groups[-1]["lr"] == schedule(3)


def test_the_state_dict_carries_a_run_on_bit_for_bit():
    model = randomize(build_model(small_cfg("pre-ln")), scale=0.05)
    opt = make_optimizer(model, CFG)
    train(model, [opt], range(2))
    saved, state = copy.deepcopy(model), copy.deepcopy(opt.state_dict())
    train(model, [opt], range(2, 5))
    kinds = {k for s in state["state"].values() for k in s}
    assert kinds == {"momentum_buffer", "step", "exp_avg", "exp_avg_sq"}  # Muon's and AdamW's state
    resumed = make_optimizer(saved, CFG)
    resumed.load_state_dict(state)
    assert resumed.muon.state is resumed.state is resumed.adamw.state
    train(saved, [resumed], range(2, 5))
    for (name, p), q in zip(model.named_parameters(), saved.parameters()):
        assert torch.equal(p, q), name
    # Without the restored state (momentum and moments from zero), the same steps land elsewhere.
    fresh = copy.deepcopy(saved)
    train(fresh, [make_optimizer(fresh, CFG)], range(5, 6))
    train(saved, [resumed], range(5, 6))
    assert not all(torch.equal(p, q) for p, q in zip(fresh.parameters(), saved.parameters()))


def test_a_closure_is_refused():
    opt = make_optimizer(build_model(small_cfg("pre-ln")), CFG)
    with pytest.raises(ValueError, match="closure"):
        opt.step(lambda: 0.0)
