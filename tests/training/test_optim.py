import math

import pytest
import torch

from blocklab import build_model
from blocklab.training.config import TrainConfig
from blocklab.training.optim import lr_factor, make_optimizer
from tests.helpers import small_cfg


def factors(**kw):
    cfg = TrainConfig(**kw)
    return [lr_factor(s, cfg) for s in range(cfg.steps)]


def test_linear_warmup_then_linear_decay():
    f = factors(steps=10, warmup_steps=4, schedule="linear")
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == 1.0 and f[4:] == sorted(f[4:], reverse=True) and 0 < f[-1] <= 1 / 6 + 1e-12


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine", "inv_sqrt"])
def test_no_warmup_allowed_everywhere(schedule):
    f = factors(steps=20, warmup_steps=0, schedule=schedule)
    assert f[0] == 1.0 and all(0 <= x <= 1 for x in f)


def test_cosine_and_inv_sqrt_shapes():
    c = factors(steps=21, warmup_steps=1, schedule="cosine")
    assert c[11] == pytest.approx(0.5)
    s = factors(steps=100, warmup_steps=16, schedule="inv_sqrt")
    assert s[15] == 1.0 and s[63] == pytest.approx(math.sqrt(16 / 64))  # fairseq: sqrt(warmup / t)
    assert factors(steps=5, warmup_steps=0, schedule="constant") == [1.0] * 5


@pytest.mark.parametrize(
    "name,cls", [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)]
)
def test_optimizers_leave_gains_out_of_weight_decay(name, cls):
    model = build_model(small_cfg("sas-p"))
    opt = make_optimizer(model, TrainConfig(optimizer=name, weight_decay=0.1))
    assert isinstance(opt, cls)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])


def test_muon_decays_its_matrices_and_the_embeddings_but_no_gain():
    model = build_model(small_cfg("sas-p"))
    opt = make_optimizer(model, TrainConfig(optimizer="muon", weight_decay=0.1))
    muon, decay, no_decay = opt.param_groups
    assert (muon["weight_decay"], decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.1, 0.0)
    assert muon["adjust_lr_fn"] == "match_rms_adamw" and muon is opt.muon.param_groups[0]
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in decay["params"]} == {"tok.weight", "pos.weight"}
    assert all(p.dim() == 2 for p in muon["params"]) and all(p.dim() < 2 for p in no_decay["params"])


def test_inv_sqrt_with_warmup_is_fairseqs_inverse_sqrt():
    f = factors(steps=200, warmup_steps=20, schedule="inv_sqrt")
    assert f[:20] == [pytest.approx((t + 1) / 20) for t in range(20)]  # linear warm-up to lr_max
    assert f[19] == 1.0 and all(f[t - 1] == pytest.approx(math.sqrt(20 / t)) for t in range(20, 201))


def test_inv_sqrt_without_warmup_starts_at_lr_max_and_decays_like_the_warmup_runs():
    """Xiong et al.'s "no warm-up": the rate starts at lr_max (not at lr_max / sqrt(t), which would
    starve every block alike); it is held until the decay time scale, then follows the warm-up runs."""
    cold = factors(steps=200, warmup_steps=0, schedule="inv_sqrt", inv_sqrt_scale=50)
    short = factors(steps=200, warmup_steps=10, schedule="inv_sqrt", inv_sqrt_scale=50)
    long = factors(steps=200, warmup_steps=50, schedule="inv_sqrt", inv_sqrt_scale=50)
    assert cold[:50] == [1.0] * 50 and short[10:50] == [1.0] * 40
    assert cold[50:] == short[50:] == long[50:]  # one decay for every warm-up: they differ in warm-up only
    assert cold[99] == pytest.approx(math.sqrt(50 / 100)) and cold[-1] == pytest.approx(0.5)
    # Without a scale, no warm-up holds lr_max for 5% of the steps (the default warm-up length).
    default = factors(steps=200, warmup_steps=0, schedule="inv_sqrt")
    assert default[:10] == [1.0] * 10 and default[39] == pytest.approx(math.sqrt(10 / 40))


def test_inv_sqrt_scale_is_validated():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="inv_sqrt_scale"):
            TrainConfig(inv_sqrt_scale=bad)
