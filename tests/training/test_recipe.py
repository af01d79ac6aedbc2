"""Block recipes (SPEC sections 2b and 10): each block paper's own training settings fill in what a run leaves
unset, never what it sets; `blocklab train` says what it applied, in its log and in summary.json."""

import json

import pytest

from blocklab.blocks import REGISTRY
from blocklab.cli import main
from blocklab.training import load_config, train
from blocklab.training.config import RunConfig, read_toml, to_toml
from blocklab.training.recipe import apply_recipe
from tests.helpers import as_args

NGPT = {"train.weight_decay": 0.0, "train.warmup_steps": 0}  # Loshchilov et al. 2024, Sec. 2.6


def test_apply_recipe_fills_only_the_unset_settings():
    raw = {"model": {"block": "ngpt"}, "train": {"weight_decay": 0.05}}
    new, applied = apply_recipe(raw)
    assert applied == {"train.warmup_steps": 0}
    assert new == {"model": {"block": "ngpt"}, "train": {"weight_decay": 0.05, "warmup_steps": 0}}
    assert raw == {"model": {"block": "ngpt"}, "train": {"weight_decay": 0.05}}  # the caller's dict is untouched
    assert apply_recipe({"model": {"block": "ngpt"}}) == (
        {"model": {"block": "ngpt"}, "train": {"weight_decay": 0.0, "warmup_steps": 0}},
        NGPT,
    )
    # an explicit None is a setting too (warm-up None: 5% of the steps)
    assert apply_recipe({"model": {"block": "ngpt"}, "train": {"warmup_steps": None}})[1] == {"train.weight_decay": 0.0}
    for raw in ({}, {"model": {"block": "pre-ln"}}, {"model": {"block": "no-such-block"}}):
        assert apply_recipe(raw) == (raw, {})  # the default block has no recipe; an unknown one is from_dict's error


@pytest.mark.parametrize("block", [b for b, s in REGISTRY.items() if s.recipe])
def test_every_recipe_is_a_valid_setting_of_its_block(block):
    raw, applied = apply_recipe({"model": {"block": block}})
    cfg = RunConfig.from_dict(raw)
    for key, value in applied.items():
        section, option = key.split(".")
        assert getattr(getattr(cfg, section), option) == value


def test_load_config_precedence_defaults_recipe_file_command_line(tmp_path):
    cfg = load_config(None, ["--model.block", "ngpt"], recipe=True)
    assert (cfg.train.weight_decay, cfg.train.warmup_steps, cfg.recipe) == (0.0, 0, NGPT)
    toml = tmp_path / "run.toml"
    toml.write_text('[model]\nblock = "ngpt"\n[train]\nweight_decay = 0.05\nsteps = 100\n')
    cfg = load_config(toml, recipe=True)  # the file wins over the recipe
    assert (cfg.train.weight_decay, cfg.train.warmup_steps, cfg.recipe) == (0.05, 0, {"train.warmup_steps": 0})
    cfg = load_config(toml, ["--train.warmup_steps", "7"], recipe=True)  # and so does the command line
    assert (cfg.train.weight_decay, cfg.train.warmup_steps, cfg.recipe) == (0.05, 7, {})
    cfg = load_config(toml, ["--train.weight_decay", "0.2"], recipe=True)
    assert (cfg.train.weight_decay, cfg.recipe) == (0.2, {"train.warmup_steps": 0})
    # off by default: a stored run's config and a sweep's merged settings load as they are
    cfg = load_config(None, ["--model.block", "ngpt", "--train.steps", "100"])
    assert (cfg.train.weight_decay, cfg.train.warmup_steps, cfg.recipe) == (0.1, 5, {})
    assert load_config(None, ["--model.block", "sas-p"], recipe=True).recipe == {}


def test_reapplying_to_a_stored_config_changes_nothing(tmp_path):
    cfg = load_config(None, ["--model.block", "ngpt"], recipe=True)
    (tmp_path / "config.toml").write_text(to_toml(cfg))
    again = load_config(tmp_path / "config.toml", recipe=True)
    assert again.to_dict() == cfg.to_dict() and again.recipe == {}


def test_ngpt_run_follows_its_recipe_and_says_so(tmp_path, overrides, capsys):
    overrides["model"]["block"] = "ngpt"
    # A constant rate: a run extends on resume only where its schedule does not derive from train.steps.
    overrides["train"].update(steps=4, eval_every=2, checkpoint_every=2, log_every=2, schedule="constant")
    out = tmp_path / "r"
    assert main([str(a) for a in ["train", "--out", out, "--no-progress", *as_args(overrides)]]) == 0
    log = capsys.readouterr().err  # a status line: stderr, beside the results on stdout
    assert "recipe of nGPT (Loshchilov et al. 2024, Sec. 2.6): train.weight_decay=0.0, train.warmup_steps=0" in log
    assert json.loads((out / "summary.json").read_text())["recipe"] == NGPT
    stored = read_toml(out / "config.toml")["train"]
    assert stored["weight_decay"] == 0.0 and stored["warmup_steps"] == 0
    # A resume loads the stored config (the recipe applies nothing to it) and still reports the recipe.
    assert main([str(a) for a in ["train", "--out", out, "--resume", "--no-progress", "--train.steps", "6"]]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["step"] == 6 and summary["recipe"] == NGPT
    assert read_toml(out / "config.toml")["train"] == dict(stored, steps=6)
    assert "recipe of nGPT" in capsys.readouterr().err


def test_an_explicit_setting_beats_the_recipe_in_a_run(tmp_path, overrides, capsys):
    overrides["model"]["block"] = "ngpt"
    overrides["train"].update(steps=2, eval_every=2, checkpoint_every=2, weight_decay=0.05)
    assert main([str(a) for a in ["train", "--out", tmp_path / "r", "--no-progress", *as_args(overrides)]]) == 0
    assert "train.warmup_steps=0" in capsys.readouterr().err
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["recipe"] == {"train.warmup_steps": 0}
    assert read_toml(tmp_path / "r" / "config.toml")["train"]["weight_decay"] == 0.05


def test_a_block_without_recipe_records_an_empty_one(tmp_path, overrides):
    overrides["model"]["block"] = "pre-ln"
    overrides["train"].update(steps=2, eval_every=2, checkpoint_every=2)
    lines = []
    s = train(
        load_config(None, overrides, recipe=True),
        tmp_path / "r",
        progress=False,
        log=lambda *a, **k: lines.append(" ".join(map(str, a))),
    )
    assert s.recipe == {} and json.loads((tmp_path / "r" / "summary.json").read_text())["recipe"] == {}
    assert not any("recipe" in line for line in lines)


def test_train_help_says_where_the_recipe_shows(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "recipe" in text and "summary.json" in text and "log" in text
    assert "ngpt --train.weight_decay 0.0, --train.warmup_steps 0 (Loshchilov et al. 2024, Sec. 2.6)" in text
