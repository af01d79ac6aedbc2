"""The presets of issue 19: zoo, depth, warm-up for every block, and Xiong et al.'s SGD arm."""
import pytest

from blocklab import BLOCKS
from blocklab.experiments import load_sweep


@pytest.mark.parametrize("name", ["zoo", "zoo-gpu"])
def test_zoo_holds_every_block_and_both_options_with_two_seeds(name):
    s = load_sweep(name)
    assert s.seeds == [0, 1] and s.target_run == "pre-ln"
    cfgs = {r.group: r.config for r in s.runs}
    assert set(BLOCKS) <= {c.model.block for c in cfgs.values()}
    assert cfgs["dyt"].model.norm == "dyt" and cfgs["dyt"].model.block == "pre-ln"
    assert cfgs["qk-norm"].model.qk_norm and cfgs["qk-norm"].model.block == "pre-ln"
    assert len(s.runs) == 2 * (len(BLOCKS) + 2)
    # one shared recipe (He & Hofmann's), nGPT alone on its paper's: no weight decay, no warm-up
    shared = {(c.train.optimizer, c.train.lr, c.train.weight_decay, c.train.warmup_steps, c.train.schedule)
              for g, c in cfgs.items() if g != "ngpt"}
    assert len(shared) == 1 and next(iter(shared))[2] == 0.1 and next(iter(shared))[3] > 0
    assert (cfgs["ngpt"].train.weight_decay, cfgs["ngpt"].train.warmup_steps) == (0.0, 0)
    steps = {c.train.steps for c in cfgs.values()}
    assert len(steps) == 1


def test_depth_runs_the_deep_training_claims_up_to_48_layers():
    s = load_sweep("depth")
    cells = {(r.config.model.block, r.config.model.n_layers) for r in s.runs}
    blocks = {"post-ln", "pre-ln", "deepnorm", "mix-ln", "lns", "sas-p", "rezero"}
    assert cells == {(b, L) for b in blocks for L in (6, 12, 24, 48)}
    assert s.seeds == [0, 1] and s.target_run == "pre-ln_L6"
    assert all(r.config.model.d_model == 64 for r in s.runs)


@pytest.mark.parametrize("name", ["warmup", "warmup-gpu"])
def test_warmup_covers_every_block(name):
    runs = load_sweep(name).runs
    cells = {(r.config.model.block, r.config.train.warmup_steps, r.config.train.lr) for r in runs}
    assert len(runs) == len(cells) == len(BLOCKS) * 3 * 2
    assert {b for b, _, _ in cells} == set(BLOCKS)


@pytest.mark.parametrize("name,warmups", [("xiong-warmup", (0, 12, 100)), ("xiong-iwslt", (0, 50, 250)),
                                          ("xiong-iwslt-gpu", (0, 500, 4000))])
def test_xiong_presets_run_adam_and_sgd_with_the_papers_rates(name, warmups):
    runs = [r.config for r in load_sweep(name).runs]
    cells = {(c.model.block, c.train.optimizer, c.train.lr, c.train.warmup_steps) for c in runs}
    adam = {(b, "adam", lr, w) for b in ("post-ln", "pre-ln") for lr in (5e-4, 1e-3) for w in warmups}
    sgd = {(b, "sgd", lr, w) for b in ("post-ln", "pre-ln") for lr in (5e-3, 1e-3) for w in warmups}
    assert cells == adam | sgd and len(runs) == len(cells)
    # both optimizers share the schedule: the runs differ in optimizer, rate and warm-up only
    assert len({(c.train.schedule, c.train.inv_sqrt_scale) for c in runs}) == 1
    assert all(c.train.momentum == 0.0 for c in runs if c.train.optimizer == "sgd")
