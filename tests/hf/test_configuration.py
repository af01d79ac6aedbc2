"""BlocklabConfig: the settings transformers users give by transformers' names (num_hidden_layers ...) or by
ModelConfig's (n_layers ...) are the model's own when it is built, from_pretrained, AutoConfig or from_config;
anything else, or a value the model cannot take, is one clear ValueError, never silently ignored."""

import pytest
import torch

from blocklab import build_model

hf = pytest.importorskip("blocklab.hf")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from tests.hf.test_models import cfg_of, trained_like  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    model = trained_like(cfg_of("pre-ln", "clm"))  # 2 layers, width 16
    hf.BlocklabForCausalLM.from_blocklab(model).save_pretrained(d)
    return d, model


def test_from_pretrained_settings_apply_before_the_weights_load(folder):
    d, model = folder
    for kwargs in ({"num_hidden_layers": 1}, {"n_layers": 1}):
        short = AutoModelForCausalLM.from_pretrained(d, **kwargs)
        assert len(short.model.blocks) == 1 == short.config.num_hidden_layers == short.config.n_layers
        assert short.config.model_config.n_layers == 1
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in short.model.state_dict().items())


def test_a_changed_config_builds_the_model_it_describes(folder):
    d, _ = folder
    config = AutoConfig.from_pretrained(d, hidden_size=32)
    assert (config.hidden_size, config.d_model, config.blocklab["d_model"]) == (32, 32, 32)
    assert AutoModelForCausalLM.from_config(config).model.tok.weight.shape == (64, 32)
    config.num_attention_heads = 4
    config.d_ff = 48
    built = AutoModelForCausalLM.from_config(config, num_hidden_layers=3)
    m = built.model
    assert (len(m.blocks), m.blocks[0].mlp.fc1.weight.shape, m.cfg.n_heads) == (3, (48, 32), 4)
    assert built.config.num_hidden_layers == 3
    config.save_pretrained(d / "cfg")
    back = AutoConfig.from_pretrained(d / "cfg")
    assert back.model_config == built.config.model_config  # what config.json says is what was built


def test_a_fresh_model_from_a_changed_config_is_still_blocklabs_init(folder):
    d, _ = folder
    config = AutoConfig.from_pretrained(d, block="sas-p")
    torch.manual_seed(3)
    want = build_model(config.model_config).state_dict()
    torch.manual_seed(3)
    got = AutoModelForCausalLM.from_config(config).model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_what_the_model_does_not_take_is_one_clear_error(folder):
    d, _ = folder
    with pytest.raises(ValueError, match=r"takes no hidden_act=: its settings are transformers' hidden_size"):
        AutoModelForCausalLM.from_pretrained(d, hidden_act="gelu")
    with pytest.raises(ValueError, match="d_model=16 is not divisible by n_heads=3"):
        AutoModelForCausalLM.from_pretrained(d, num_attention_heads=3)
    with pytest.raises(ValueError, match="block='nope' is not valid"):
        AutoModelForCausalLM.from_pretrained(d, block="nope")


def test_config_json_keeps_transformers_names_beside_the_whole_model_config(folder):
    import json

    d, model = folder
    saved = json.loads((d / "config.json").read_text())
    assert saved["blocklab"] == model.cfg.to_dict()
    assert (saved["hidden_size"], saved["num_hidden_layers"], saved["max_position_embeddings"]) == (16, 2, 12)
