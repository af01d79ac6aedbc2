"""Tuned sweeps: the [tune] table, the runs it makes, final runs at each group's best, recipes and sizes."""

import dataclasses

import pytest

from blocklab.errors import ConfigError, UserError
from blocklab.experiments import build_sweep
from blocklab.experiments.tuning import TUNE_FIELDS, Tune, log_grid, parse_tune
from blocklab.settings import KEY

BASE = {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}, "train": {"steps": 20}}
TWO = [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "sas-p", "model.block": "sas-p"}]


def test_tune_defaults_keep_tuning_seeds_apart_from_final_seeds():
    t = parse_tune({"values": [1e-3, 3e-3]}, [0, 1, 2])
    assert (t.key, t.values, t.seeds, t.reuse, t.tolerance, t.extend) == (
        "train.lr",
        (1e-3, 3e-3),
        (3, 4),
        False,
        0.1,
        2,
    )
    assert parse_tune({"values": [1e-3], "seeds": [0], "reuse": True}, [0, 1]).seeds == (0,)
    with pytest.raises(UserError, match="share seed 1 with the final seeds.*reuse = true"):
        parse_tune({"values": [1e-3], "seeds": [1, 5]}, [0, 1])


def test_log_spaced_grid():
    assert log_grid(1e-4, 1e-2, 5) == (1e-4, 0.000316, 1e-3, 0.00316, 1e-2)
    assert parse_tune({"min": 1e-3, "max": 1e-1, "points": 3}, [0]).values == (1e-3, 1e-2, 1e-1)


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"values": [1e-3], "min": 1e-4}, "either values or min, max and points"),
        ({}, "needs values"),
        ({"values": [3e-3, 1e-3]}, "ascending"),
        ({"values": [1e-3, 1e-3]}, "distinct"),
        ({"values": [1e-3], "key": "lr"}, "dotted setting"),
        ({"values": [1e-3], "key": "model.block"}, "cannot be tuned"),
        ({"values": [1e-3], "tolerance": 0}, "tolerance"),
        ({"values": [1e-3], "reuse": "yes"}, "reuse"),
        ({"values": [1e-3], "seed": [1]}, "unknown field 'seed' in tune"),
        ({"values": [1e-3], "extend": -1}, "tune.extend=-1 is not valid"),
        ({"min": 1e-2, "max": 1e-3, "points": 3}, "0 < min < max"),
    ],
)
def test_bad_tune_tables_are_one_line_errors(spec, message):
    with pytest.raises(UserError, match=message) as e:
        parse_tune(spec, [0])
    assert "\n" not in str(e.value)


def test_every_tune_key_is_a_setting_with_a_one_line_help_under_its_spec_spelling():
    assert TUNE_FIELDS == ("key", "values", "min", "max", "points", "seeds", "reuse", "tolerance", "extend")
    for f in dataclasses.fields(Tune):
        assert f.metadata[KEY].help.strip() and "\n" not in f.metadata[KEY].help
    assert Tune.__dataclass_fields__["seeds"].metadata[KEY].derived  # its default follows the final seeds


@pytest.mark.parametrize(
    "spec, where, message",
    [
        ({"values": [1e-3], "tolerance": -1}, "tune", "tune.tolerance=-1 is not valid; it must be a positive number"),
        ({"min": 1e-4, "max": 1e-2, "points": 1}, "tune", "tune.points=1 is not valid; it must be an integer >= 2"),
        ({"min": 0, "max": 1e-2, "points": 3}, "tune", "tune.min=0 is not valid; it must be a positive number"),
        ({"values": [1e-3], "seeds": [-1]}, "tune", "tune.seeds=[-1] is not valid; it must be a non-empty list"),
        ({"values": [1e-3], "seeds": []}, "tune", "tune.seeds=[] is not valid; it must be a non-empty list"),
        ({"values": [[1]]}, "tune", "tune.values=[[1]] is not valid; it must be a non-empty list of distinct"),
        ({"values": [1e-3], "reuse": 1}, "experiments.a.tune", "experiments.a.tune.reuse=1 is not valid"),
        (
            {"values": [1e-3], "key": 5},
            "tune",
            'tune.key=5 is not valid; it must be a dotted setting such as "train.lr"',
        ),
    ],
)
def test_bad_tune_keys_are_one_line_naming_the_key(spec, where, message):
    with pytest.raises(ConfigError) as e:
        parse_tune(spec, [0], where)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_tuned_sweep_runs_each_group_over_the_grid_then_its_final_seeds_at_its_best():
    s = build_sweep({"name": "t", "seeds": [0, 1], "base": BASE, "tune": {"values": [1e-3, 1e-2]}, "runs": TWO})
    assert [r.name for r in s.runs] == [
        f"{b}_lr{v}_s{seed}" for b in ("pre-ln", "sas-p") for v in ("0.001", "0.01") for seed in (2, 3)
    ]
    assert all(r.phase == "tune" and r.config.train.seed in (2, 3) for r in s.runs)
    assert [r.config.train.lr for r in s.runs] == [1e-3, 1e-3, 1e-2, 1e-2] * 2
    finals = s.final_runs({("pre-ln", None): 1e-2, ("sas-p", None): 1e-3})
    assert [(r.name, r.config.train.lr, r.config.train.seed) for r in finals] == [
        ("pre-ln_lr0.01_s0", 1e-2, 0),
        ("pre-ln_lr0.01_s1", 1e-2, 1),
        ("sas-p_lr0.001_s0", 1e-3, 0),
        ("sas-p_lr0.001_s1", 1e-3, 1),
    ]
    assert s.final_runs({("pre-ln", None): 1e-2})[0].group == "pre-ln"  # a group without a best waits
    assert len(s.final_runs({("pre-ln", None): 1e-2})) == 2
    saved = s.to_json(finals)
    assert [r["name"] for r in saved["tuning"]] == [r.name for r in s.runs]
    assert saved["runs"][0]["dir"] == "runs/pre-ln_lr0.01_s0" and saved["tune"]["None"]["values"] == [1e-3, 1e-2]


def test_compare_seeds_move_the_default_tuning_seeds():
    spec = {"name": "t", "seeds": [0, 1], "base": BASE, "tune": {"values": [1e-3]}, "runs": TWO}
    s = build_sweep(spec, seeds=[3, 4])
    assert s.seeds == [3, 4] and {r.config.train.seed for r in s.runs} == {5, 6}


def test_a_tuned_sweep_without_seeds_has_five_final_seeds_and_two_tuning_seeds():
    s = build_sweep({"name": "t", "base": BASE, "tune": {"values": [1e-3]}, "runs": TWO})
    assert s.final_seeds() == [0, 1, 2, 3, 4] and s.tune_of(s.groups[0]).seeds == (5, 6)
    assert s.n_runs == 2 * 2 + 2 * 5


def test_reuse_counts_tuning_runs_at_the_best_as_final_seeds():
    s = build_sweep(
        {
            "name": "t",
            "seeds": [0],
            "base": BASE,
            "runs": TWO[:1],
            "tune": {"values": [1e-3, 1e-2], "seeds": [0, 7], "reuse": True},
        }
    )
    finals = s.final_runs({("pre-ln", None): 1e-3})
    assert [r.name for r in finals] == ["pre-ln_lr0.001_s0", "pre-ln_lr0.001_s7"]
    assert {r.name for r in finals} <= {r.name for r in s.runs}  # the same runs: trained once


def test_each_experiment_tunes_its_own_setting():
    spec = {
        "name": "t",
        "seeds": [0, 1],
        "base": BASE,
        "experiments": {"a": {"tune": {"values": [1e-3, 1e-2]}}, "b": {"title": "B"}},
        "runs": [dict(TWO[0], experiment="a"), dict(TWO[1], experiment="b")],
    }
    s = build_sweep(spec)
    tuned = ["pre-ln_lr0.001_s2", "pre-ln_lr0.001_s3", "pre-ln_lr0.01_s2", "pre-ln_lr0.01_s3"]
    assert [r.name for r in s.runs] in (["sas-p_s0", "sas-p_s1"] + tuned, tuned + ["sas-p_s0", "sas-p_s1"])
    assert s.experiments["b"]["title"] == "B" and "tune" not in s.experiments["a"]


def test_the_tuned_setting_is_the_sweeps_alone():
    spec = {"name": "t", "base": BASE, "tune": {"values": [1e-3]}, "runs": TWO}
    with pytest.raises(UserError, match="--train.lr is the tuned setting"):
        build_sweep(spec, {"train": {"lr": 1e-2}})
    with pytest.raises(UserError, match="run 'x' sets train.lr, the setting its experiment tunes"):
        build_sweep(dict(spec, runs=[{"name": "x", "label": "x", "train.lr": 1e-3}]))


def test_recipes_apply_between_the_base_and_the_groups_own_settings():
    spec = {
        "name": "t",
        "seeds": [0],
        "base": {**BASE, "train": {"steps": 20, "weight_decay": 0.1}},
        "runs": [
            {"name": "ngpt", "model.block": "ngpt"},
            {"name": "ngpt-wd", "model.block": "ngpt", "train.weight_decay": 0.05},
            {"name": "pre", "model.block": "pre-ln"},
        ],
    }
    s = build_sweep(spec)
    cfg = {r.group: r.config.train for r in s.runs}
    assert (cfg["ngpt"].weight_decay, cfg["ngpt"].warmup_steps) == (0.0, 0)  # recipe over the sweep's base
    assert (cfg["ngpt-wd"].weight_decay, cfg["ngpt-wd"].warmup_steps) == (0.05, 0)  # the group's own wins
    assert cfg["pre"].weight_decay == 0.1 and cfg["pre"].warmup_steps == 1
    groups = {g.name: g for g in s.groups}
    assert groups["ngpt"].settings == {"train.weight_decay": 0.0, "train.warmup_steps": 0, "model.block": "ngpt"}
    assert groups["pre"].settings == {"model.block": "pre-ln"}
    assert s.runs[0].config.recipe == {"train.weight_decay": 0.0, "train.warmup_steps": 0}
    cli = build_sweep(spec, {"train": {"weight_decay": 0.2}})  # the command line over everything
    assert {r.config.train.weight_decay for r in cli.runs} == {0.2}


def test_sizes_repeat_each_group_and_name_their_runs():
    spec = {
        "name": "t",
        "seeds": [0],
        "base": BASE,
        "tune": {"values": [1e-3]},
        "runs": TWO[:1],
        "sizes": [{"model.d_model": 16, "train.steps": 10}, {"model.d_model": 32}],
    }
    s = build_sweep(spec)
    assert [(r.name, r.config.model.d_model, r.config.train.steps) for r in s.runs] == [
        ("pre-ln_z0_lr0.001_s1", 16, 10),
        ("pre-ln_z0_lr0.001_s2", 16, 10),
        ("pre-ln_z1_lr0.001_s1", 32, 20),
        ("pre-ln_z1_lr0.001_s2", 32, 20),
    ]
    finals = s.final_runs({("pre-ln", 0): 1e-3, ("pre-ln", 1): 1e-3})
    assert [(r.name, r.group, r.size) for r in finals] == [
        ("pre-ln_z0_lr0.001_s0", "pre-ln_z0", 0),
        ("pre-ln_z1_lr0.001_s0", "pre-ln_z1", 1),
    ]
    with pytest.raises(UserError, match="sizes"):
        build_sweep(dict(spec, sizes=[{"d_model": 16}]))
