"""train.qk_clip (training/qk_clip.py): a head driven past tau comes back to tau on that batch, every other
head and weight stays bit for bit; off, or never reached, it changes nothing; its maxima are logged."""

import json

import pytest
import torch

from blocklab import build_model
from blocklab.errors import ConfigError
from blocklab.training import load_config, train
from blocklab.training.distributed import Dist
from blocklab.training.qk_clip import QKClip
from tests.helpers import randomize, small_cfg


def maxima(clip: QKClip) -> torch.Tensor:
    """(attentions, heads): what each attention kept since the last take."""
    return torch.stack([m.take_max_logits() for _, m in clip.attentions])


@pytest.mark.parametrize("block", ["pre-ln", "sas-p", "hyper-connections"])
def test_a_head_past_tau_returns_to_tau_on_that_batch_and_nothing_else_moves(block):
    torch.manual_seed(0)
    model = randomize(build_model(small_cfg(block, bias=block == "pre-ln")), scale=0.1).train()
    clip = QKClip(model, 1.0, Dist(), block)
    ids = torch.randint(0, 97, (4, 24))
    model(ids)
    first = maxima(clip)
    layer, head = 1, 2  # drive one head of block 1 past the others by scaling its queries
    attn = [m for name, m in clip.attentions if name == f"L{layer}"][0]
    with torch.no_grad():
        attn.q.weight[8 * head : 8 * (head + 1)] *= 30.0
    model(ids[:2])
    model(ids[2:])  # two micro-batches of one step: the maxima are the whole batch's
    driven = maxima(clip)
    a = [m for _, m in clip.attentions].index(attn)
    tau = 2 * first.max().item()
    clip.tau = tau
    assert driven[a, head] > 5 * tau and (driven <= tau).sum() == driven.numel() - 1  # only it is past tau
    before = {n: p.clone() for n, p in model.named_parameters()}
    model(ids)  # the step's forward, as the trainer's; the clip follows the optimizer's step
    clip.step()
    assert clip.values()[f"max_logit/L{layer}"] == pytest.approx(driven[a, head].item(), rel=1e-6)  # before it
    model(ids)
    after = maxima(clip)
    assert after[a, head].item() == pytest.approx(tau, rel=1e-5)  # back to tau on that batch
    # Every other head of that layer and the layers before it sees the same input with the same weights: its
    # logits bit for bit (the layers after it read the changed head's output).
    others = torch.ones_like(after[: a + 1], dtype=torch.bool)
    others[a, head] = False
    assert torch.equal(after[: a + 1][others], driven[: a + 1][others])
    rows = slice(8 * head, 8 * (head + 1))
    for name, p in model.named_parameters():
        if name.startswith(f"blocks.{layer}.attn.") and name.endswith(("q.weight", "k.weight", "q.bias", "k.bias")):
            assert not torch.equal(p[rows], before[name][rows]), name
            old = before[name]
            assert torch.equal(p[: rows.start], old[: rows.start]) and torch.equal(p[rows.stop :], old[rows.stop :])
        else:
            assert torch.equal(p, before[name]), name


def test_a_block_it_cannot_clip_is_refused_by_the_trainer_too():
    with pytest.raises(ConfigError, match=r"train.qk_clip=1.0 does not apply to block 'ngpt': nGPT normalises"):
        QKClip(build_model(small_cfg("ngpt")), 1.0, Dist(), "ngpt")


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run):
    return [r["loss"] for r in rows(run) if "loss" in r]


def test_qk_clip_never_reached_changes_nothing_and_the_maxima_are_logged(tmp_path, overrides):
    overrides["model"]["block"] = "pre-ln"  # sas-p's zero W^Q starts its logits at 0
    overrides["train"].update(steps=8, log_every=1)
    train(load_config(None, overrides), tmp_path / "off", progress=False, log=lambda *a: None)
    overrides["train"]["qk_clip"] = 1e9
    train(load_config(None, overrides), tmp_path / "high", progress=False, log=lambda *a: None)
    assert losses(tmp_path / "high") == losses(tmp_path / "off")  # bit for bit: no head past tau, no change
    logged = [r for r in rows(tmp_path / "high") if "loss" in r]
    assert all({"max_logit/L0", "max_logit/L1"} <= set(r) for r in logged)
    assert all(0 < r["max_logit/L0"] < 1e3 for r in logged)
    assert not any(k.startswith("max_logit") for r in rows(tmp_path / "off") for k in r)  # off: nothing
    tau = min(min(r["max_logit/L0"], r["max_logit/L1"]) for r in logged) / 2  # below every logged maximum
    overrides["train"]["qk_clip"] = tau
    train(load_config(None, overrides), tmp_path / "low", progress=False, log=lambda *a: None)
    assert losses(tmp_path / "low")[0] == losses(tmp_path / "off")[0]  # the first forward precedes any clip
    assert losses(tmp_path / "low")[1:] != losses(tmp_path / "off")[1:]
    first = rows(tmp_path / "low")[0]  # step 1's maxima, measured before its clip: those of the unclipped run
    assert first["max_logit/L0"] == logged[0]["max_logit/L0"] > tau
