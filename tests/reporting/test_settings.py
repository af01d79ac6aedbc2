"""reporting/settings.py: the settings a table's runs share are listed once, and only those that apply to a block
(or optimizer, task, norm) of the table: a block-only knob of a block the sweep does not train is no setting of it."""

from pathlib import Path

from blocklab.reporting.runs import Run
from blocklab.reporting.settings import settings_lines, shared_settings, varying_settings
from blocklab.training.config import load_config


def run(name: str, **sections) -> Run:
    cfg = load_config(None, sections).to_dict()
    return Run(Path(name), name, name, config=cfg)


def test_block_only_knobs_are_listed_only_when_a_block_of_the_sweep_has_them():
    pre, sasp = run("pre", model={"block": "pre-ln"}), run("sasp", model={"block": "sas-p"})
    shared = shared_settings([pre, sasp])
    knobs = ("hc_streams", "hc_dynamic", "attn_res_block", "denseformer_dilation", "denseformer_period")
    knobs += ("laurel_rank", "value_residual_learnable", "hybridnorm_first_pre", "beta_v", "dyt_alpha", "n_labels")
    assert not [k for k in knobs if ("model", k) in shared]
    assert ("train", "momentum") not in shared and ("train", "beta2") in shared  # AdamW runs: Adam's betas apply
    assert shared[("model", "d_model")] == 256 and ("model", "norm") in shared
    assert "hc_streams" not in " ".join(text for _, text in settings_lines(shared))
    hc = run("hc", model={"block": "hyper-connections"})
    shared = shared_settings([pre, hc])  # HC's knobs apply to one block of the table: listed once, as shared
    assert shared[("model", "hc_streams")] == 4 and shared[("model", "hc_dynamic")] is True
    assert ("model", "laurel_rank") not in shared
    assert varying_settings([pre, hc]) == {"pre": "", "hc": ""}  # the block has its own column


def test_a_knob_that_differs_between_runs_of_its_block_is_named_in_their_rows():
    a = run("a", model={"block": "laurel", "laurel_rank": 8})
    b = run("b", model={"block": "laurel", "laurel_rank": 16})
    assert ("model", "laurel_rank") not in shared_settings([a, b])
    assert varying_settings([a, b]) == {"a": "laurel_rank=8", "b": "laurel_rank=16"}


def test_an_older_config_without_a_rule_s_key_keeps_its_settings():
    old = Run(Path("old"), "old", "old", config={"model": {"hc_streams": 4, "d_model": 64}})  # no block key
    assert shared_settings([old])[("model", "hc_streams")] == 4
