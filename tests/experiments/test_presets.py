"""The presets: zoo, depth, warm-up for every block, and Xiong et al.'s SGD arm, each tuned per group."""

import functools
import hashlib
import json
import re
from pathlib import Path

import pytest

from blocklab import BLOCKS
from blocklab.experiments import PRESETS, load_sweep
from blocklab.experiments.presets import PRESETS as SPECS

# Xiong et al.'s rates (Adam 5e-4 and 1e-3, SGD 1e-3 and 5e-3), each grid widened by one value on both sides
XIONG_ADAM_LRS = SPECS["xiong-warmup"]["experiments"]["adam"]["tune"]["values"]
XIONG_SGD_LRS = SPECS["xiong-warmup"]["experiments"]["sgd"]["tune"]["values"]
RESFORMER_FEWER = 0.1611  # ResFormer's "16.11% fewer model parameters" (Zhou et al. 2024, abstract)


@functools.cache
def preset(name):
    """load_sweep(name), built once for the module: a preset's plan is a pure function of its files, the tests
    only read it, and building the larger ones (~1,000 runs) is most of this file's time."""
    return load_sweep(name)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_valid_configs(name):
    s = preset(name)
    assert s.runs and s.description and s.expected_cost
    assert all(r.config is not None for r in s.runs)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_tunes_its_learning_rate_with_seeds_apart(name):
    s = preset(name)
    assert s.tunes and {t.key for t in s.tunes.values()} == {"train.lr"}
    for t in s.tunes.values():
        assert len(t.values) >= 3 and not set(t.seeds) & set(s.final_seeds())  # a best can be interior
        assert len(t.seeds) == 2  # a value is trainable where both tuning seeds completed
    assert s.final_seeds() == [0, 1, 2, 3, 4]  # a paired test with a seed to spare


@pytest.mark.parametrize("name", ["zoo", "zoo-gpu"])
def test_zoo_holds_every_block_and_both_options_with_five_seeds(name):
    s = preset(name)
    assert s.seeds == [0, 1, 2, 3, 4] and s.target_run == "pre-ln"
    cfgs = {r.group: r.config for r in s.runs}
    assert set(BLOCKS) <= {c.model.block for c in cfgs.values()}
    assert cfgs["dyt"].model.norm == "dyt" and cfgs["dyt"].model.block == "pre-ln"
    assert cfgs["qk-norm"].model.qk_norm and cfgs["qk-norm"].model.block == "pre-ln"
    n_lrs = len(s.tune_of(s.groups[0]).values)
    assert n_lrs == {"zoo": 5, "zoo-gpu": 3}[name] and len(s.runs) == 2 * n_lrs * (
        len(BLOCKS) + 3
    )  # every block and the three options (DyT, QK-norm, Canon) on 2 tuning seeds; the final seeds follow
    assert cfgs["canon"].model.canon == "ABCD" and cfgs["canon"].model.block == "pre-ln"
    # He & Hofmann's recipe has a plateau the models leave late: no stall rule ends them
    assert all(c.train.stall_patience == 0 for c in cfgs.values())
    # one shared recipe (He & Hofmann's), nGPT and T-Fixup alone on their papers': no weight decay, no warm-up
    shared = {
        (c.train.optimizer, c.train.weight_decay, c.train.warmup_steps, c.train.schedule)
        for g, c in cfgs.items()
        if g not in ("ngpt", "t-fixup")
    }
    assert len(shared) == 1 and next(iter(shared))[1] == 0.1 and next(iter(shared))[2] > 0
    # every block over the grid, on each tuning seed
    assert len({(r.group, r.config.train.lr, r.config.train.seed) for r in s.runs}) == len(s.runs)
    assert (cfgs["ngpt"].train.weight_decay, cfgs["ngpt"].train.warmup_steps) == (0.0, 0)
    assert (cfgs["t-fixup"].train.weight_decay, cfgs["t-fixup"].train.warmup_steps) == (0.1, 0)
    steps = {c.train.steps for c in cfgs.values()}
    assert len(steps) == 1


def test_depth_runs_the_deep_training_claims_up_to_48_layers():
    s = preset("depth")
    cells = {(r.config.model.block, r.config.model.n_layers) for r in s.runs}
    blocks = {"post-ln", "pre-ln", "deepnorm", "mix-ln", "lns", "sas-p", "rezero"}
    assert cells == {(b, L) for b in blocks for L in (6, 12, 24, 48)}
    assert s.seeds == [0, 1, 2, 3, 4]
    assert all(r.config.model.d_model == 64 and r.config.train.stall_patience == 0 for r in s.runs)


def test_depth_compares_each_block_with_pre_ln_at_its_own_depth():
    s = preset("depth")
    depth_of = {r.group: r.config.model.n_layers for r in s.runs}
    for name, meta in s.experiments.items():
        groups = {r.group for r in s.runs if r.experiment == name}
        assert meta["target_run"] in groups and {depth_of[g] for g in groups} == {depth_of[meta["target_run"]]}
        assert len(groups) == 7
    assert len(s.experiments) == 4


@pytest.mark.parametrize("name", ["warmup", "warmup-gpu"])
def test_warmup_covers_every_block(name):
    runs = preset(name).runs
    cells = {(r.config.model.block, r.config.train.warmup_steps, r.config.train.lr) for r in runs}
    assert len(runs) == 2 * len(cells) == 2 * len(BLOCKS) * 3 * 3  # two tuning seeds
    assert {b for b, _, _ in cells} == set(BLOCKS)


@pytest.mark.parametrize(
    "name,warmups", [("xiong-warmup", (0, 12, 100)), ("xiong-iwslt", (0, 50, 250)), ("xiong-iwslt-gpu", (0, 500, 4000))]
)
def test_xiong_presets_run_adam_and_sgd_with_the_papers_rates(name, warmups):
    sweep = preset(name)
    runs = [r.config for r in sweep.runs]
    cells = {(c.model.block, c.train.optimizer, c.train.lr, c.train.warmup_steps) for c in runs}
    adam = {(b, "adam", lr, w) for b in ("post-ln", "pre-ln") for lr in XIONG_ADAM_LRS for w in warmups}
    sgd = {(b, "sgd", lr, w) for b in ("post-ln", "pre-ln") for lr in XIONG_SGD_LRS for w in warmups}
    assert {5e-4, 1e-3} <= set(XIONG_ADAM_LRS) and {5e-3, 1e-3} <= set(XIONG_SGD_LRS)  # the paper's rates
    assert {r.experiment for r in sweep.runs if r.config.train.optimizer == "sgd"} == {"sgd"}
    assert cells == adam | sgd and len(runs) == 2 * len(cells)  # two tuning seeds
    # both optimizers share the schedule: the runs differ in optimizer, rate and warm-up only
    assert len({(c.train.schedule, c.train.inv_sqrt_scale) for c in runs}) == 1
    assert all(c.train.momentum == 0.0 for c in runs if c.train.optimizer == "sgd")


@pytest.mark.parametrize("name", ["scaling", "scaling-gpu"])
def test_scaling_tunes_pre_ln_sas_p_and_two_successors_at_three_sizes(name):
    from blocklab.blocks import REGISTRY

    s = preset(name)
    assert len(s.sizes) >= 3 and s.target_run == "pre-ln"
    blocks = {g.overrides["model"]["block"] for g in s.groups}
    assert {"pre-ln", "sas-p", "muddformer"} <= blocks and sum(REGISTRY[b].family == "successor" for b in blocks) == 2
    widths = [r.config.model.d_model for r in s.runs if r.group.startswith("pre-ln")]
    assert sorted(set(widths)) == sorted({w["model.d_model"] for w in s.sizes})  # tuned at every size
    flops = [
        r.config.model.d_model**2 * r.config.model.n_layers * r.config.train.steps
        for r in s.runs
        if r.group.startswith("pre-ln") and r.value == s.tunes[None].values[0] and r.seed == 5
    ]
    assert flops == sorted(flops) and len(set(flops)) == len(flops)  # each size more compute than the last


@pytest.mark.parametrize("name", ["stream", "stream-depth", "stream-depth-gpu", "stream-gpu"])
def test_stream_sets_every_residual_stream_block_against_pre_ln_at_its_depth(name):
    from blocklab.blocks import REGISTRY

    s = preset(name)
    stream = {b for b in BLOCKS if REGISTRY[b].family == "stream"}
    assert len(stream) == 8
    for exp, meta in s.experiments.items():
        cfgs = {r.group: r.config for r in s.runs if r.experiment == exp}
        assert {c.model.block for c in cfgs.values()} == stream | {"pre-ln"}
        assert len(cfgs) == len(stream) + 2  # and ResFormer with fewer parameters (the next test)
        assert cfgs[meta["target_run"]].model.block == "pre-ln"
        assert len({c.model.n_layers for c in cfgs.values()}) == 1  # each against Pre-LN at its own depth
    depths = sorted({r.config.model.n_layers for r in s.runs})
    assert depths == {"stream": [4], "stream-depth": [24], "stream-depth-gpu": [24, 48], "stream-gpu": [6]}[name]


@pytest.mark.parametrize("name", ["stream", "stream-depth", "stream-depth-gpu", "stream-gpu"])
def test_stream_puts_a_resformer_with_the_claimed_fewer_parameters_beside_pre_ln(name):
    """ResFormer's claim (16.11% fewer parameters, the same loss) needs a ResFormer of 83.89% of Pre-LN's size at
    each depth: the MLP width of SMALL_RESFORMER_D_FF gives it to within 0.5% of the model."""
    from blocklab import build_model

    s = preset(name)
    for exp, meta in s.experiments.items():
        cfgs = {r.group: r.config for r in s.runs if r.experiment == exp}
        small = [c for g, c in cfgs.items() if g.startswith("value-residual-small")]
        assert len(small) == 1 and small[0].model.block == "value-residual"
        sizes = [
            sum(p.numel() for p in build_model(c.model).parameters()) for c in (small[0], cfgs[meta["target_run"]])
        ]
        assert sizes[0] / sizes[1] == pytest.approx(1 - RESFORMER_FEWER, abs=0.005)


# Every preset's plan, pinned when the presets moved from Python dicts to TOML files (issue 43): a sha256 of the
# sorted (run name, phase, experiment, resolved config) of every run it plans, and its run count. A deliberate
# change to a preset updates it: `python -m tests.experiments.test_presets --regenerate`.
PLANS = Path(__file__).with_name("preset_plans.json")


def plan_digest(sweep) -> str:
    from blocklab.training.config import to_toml

    rows = sorted((r.name, r.phase, r.experiment or "", to_toml(r.config)) for r in sweep.runs)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


@functools.cache
def preset_digest(name) -> str:
    return plan_digest(preset(name))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_plans_the_runs_it_planned_when_pinned(name):
    pinned = json.loads(PLANS.read_text())
    assert name in pinned, f"preset {name} has no pinned plan: regenerate {PLANS.name}"
    s = preset(name)
    assert (preset_digest(name), s.n_runs) == (pinned[name]["runs_sha256"], pinned[name]["n_runs"])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_dumped_preset_is_a_sweep_file_planning_the_same_runs(name, tmp_path, capsys):
    from blocklab.cli import main

    assert main(["compare", "--preset", name, "--dump"]) == 0
    path = tmp_path / "my.toml"
    path.write_text(capsys.readouterr().out)
    assert plan_digest(load_sweep(str(path))) == preset_digest(name)


def test_the_zoo_lists_every_block_and_stream_every_stream_block():
    from blocklab.registry import PUBLIC_BLOCKS, REGISTRY

    zoo = {r["model.block"] for r in SPECS["zoo"]["runs"]}
    assert set(PUBLIC_BLOCKS) <= zoo, f"add {sorted(set(PUBLIC_BLOCKS) - zoo)} to presets/zoo.toml"
    stream = {r["model.block"] for r in SPECS["stream"]["runs"]}
    assert {b for b in PUBLIC_BLOCKS if REGISTRY[b].family == "stream"} <= stream


def test_an_overlay_merges_tables_and_replaces_the_rest():
    from blocklab.experiments.presets import merge

    base = {"a": {"x": 1, "y": 2}, "runs": [{"n": 1}], "e": {"k": {"v": 1}}}
    over = {"a": {"y": 3}, "runs": [{"n": 2}], "e": {"j": {"v": 2}}}
    assert merge(base, over) == {"a": {"x": 1, "y": 3}, "runs": [{"n": 2}], "e": {"k": {"v": 1}, "j": {"v": 2}}}
    assert merge(base, over, ("e",))["e"] == {"j": {"v": 2}}


def _regenerate() -> None:
    found = {}
    for name in sorted(PRESETS):
        s = preset(name)
        found[name] = {"runs_sha256": plan_digest(s), "n_runs": s.n_runs}
    PLANS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    if "--regenerate" in sys.argv:
        _regenerate()


@pytest.mark.parametrize("name", sorted(n for n in SPECS if n.endswith("-gpu")))
def test_a_gpu_preset_says_the_gpus_it_was_sized_for(name):
    # compare --help prints it; README "On a cluster" takes --gpus-per-run from it.
    cost = SPECS[name]["expected_cost"]
    head = re.match(
        r"Sized for one GPU \(an 80 GB H100\), (one run|(\d+) runs) at a time.*--gpus-per-run ([0-9.]+)\.", cost
    )
    assert head, cost
    runs = int(head.group(2) or 1)
    assert runs * float(head.group(3)) <= 1 < (runs + 1) * float(head.group(3))  # that many runs share the GPU
