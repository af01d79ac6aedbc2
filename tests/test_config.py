import pytest

from blocklab import ModelConfig


@pytest.mark.parametrize(
    "kw,field,words",
    [
        (dict(block="transformer"), "block", ["transformer", "sas-p", "pre-ln"]),
        (dict(task="seq2seq"), "task", ["seq2seq", "clm", "mlm"]),
        (dict(norm="batchnorm"), "norm", ["batchnorm", "rmsnorm", "layernorm"]),
        (dict(activation="tanh"), "activation", ["tanh", "relu", "gelu"]),
        (dict(init="kaiming"), "init", ["kaiming", "normal", "xavier"]),
        (dict(attn_impl="flash"), "attn_impl", ["flash", "sdpa", "materialized"]),
        (dict(positions="rope"), "positions", ["rope", "learned", "sinusoidal"]),
        (dict(d_model=250, n_heads=4), "d_model", ["250", "n_heads"]),
        (dict(d_model=0), "d_model", ["0", "positive"]),
        (dict(n_layers=-2), "n_layers", ["-2", "positive"]),
        (dict(vocab_size=2.5), "vocab_size", ["2.5", "positive"]),
        (dict(block="pre-ln", beta_ff=0.1), "beta_ff", ["pre-ln", "sas-p"]),
    ],
)
def test_invalid_fields_name_field_value_and_choices(kw, field, words):
    with pytest.raises(ValueError) as e:
        ModelConfig(**kw)
    msg = str(e.value)
    assert field in msg
    for w in words:
        assert w in msg


def test_unknown_option_is_a_value_error_naming_it():
    # (`dropout` itself became an option with translation: SPEC section 3)
    for make in (lambda: ModelConfig(attention_dropout=0.1), lambda: ModelConfig.from_dict({"attention_dropout": 0.1})):
        with pytest.raises(ValueError) as e:
            make()
        assert "attention_dropout" in str(e.value) and "0.1" in str(e.value) and "block" in str(e.value)


def test_defaults_match_spec():
    c = ModelConfig()
    assert (c.task, c.norm, c.activation, c.init, c.attn_impl, c.positions) == (
        "clm",
        "rmsnorm",
        "relu",
        "normal",
        "auto",
        "learned",
    )
    assert c.tie_embeddings and not c.mlp_bias and c.causal
    assert not ModelConfig(task="mlm").causal
    assert ModelConfig(block="sas-p").resolved("beta_ff") == 0.1
    assert ModelConfig(block="sas-p").resolved("beta_sa") == 1.0


def _block_only_knobs():
    """(name, blocks it applies to, a value other than its default) for every setting only some blocks read."""
    from dataclasses import MISSING, fields

    from blocklab.settings import KEY, OnlyWhere

    out = []
    for f in fields(ModelConfig):
        rule = f.metadata[KEY].applies
        if isinstance(rule, OnlyWhere) and rule.key == "block":
            d = f.default if f.default is not MISSING else f.default_factory()
            choices = f.metadata[KEY].valid_choices()
            other = next(c for c in choices if c != d) if choices else (not d) if isinstance(d, bool) else 2 * d or 1
            out.append(pytest.param(f.name, rule.values, other, id=f.name))
    return out


def test_block_only_knobs_are_every_knob_of_one_block_family():
    knobs = {p.values[0] for p in _block_only_knobs()}
    assert {"beta_v", "hc_streams", "hc_dynamic", "frac_fractions", "laurel_rank", "attn_res_block"} <= knobs
    assert {
        "denseformer_dilation",
        "value_residual_learnable",
        "normformer_head_scale",
        "hybridnorm_first_pre",
    } <= knobs


@pytest.mark.parametrize("name,blocks,value", _block_only_knobs())
def test_a_block_only_knob_on_another_block_is_refused_naming_the_blocks_it_applies_to(name, blocks, value):
    """hc_streams on a block without streams is one line naming the blocks that have them; the knob's own
    blocks take the same value, and any block takes the default (a resolved config lists every setting)."""
    with pytest.raises(ValueError) as e:
        ModelConfig(block="pre-ln", **{name: value})
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == f"{name}={value!r} does not apply to block 'pre-ln'; it applies to: {', '.join(blocks)}"
    for block in blocks:
        assert getattr(ModelConfig(block=block, **{name: value}), name) == value
    default = ModelConfig.__dataclass_fields__[name].default
    assert getattr(ModelConfig(block="pre-ln", **{name: default}), name) == default


def test_a_block_only_knob_on_another_block_is_one_line_from_the_command_line():
    from blocklab.errors import UserError
    from blocklab.training.config import load_config

    with pytest.raises(
        UserError, match=r"hc_streams=8 does not apply to block 'pre-ln'; it applies to: hyper-connections, mhc"
    ):
        load_config(None, {"model": {"block": "pre-ln", "hc_streams": 8}})
    assert load_config(None, {"model": {"block": "mhc", "hc_streams": 8}}).model.hc_streams == 8


@pytest.mark.parametrize("block", ["pre-ln", "post-ln", "sas-p"])
def test_rough_parameters_are_the_built_models_matrices(block):
    from blocklab.model import build_model, count_parameters

    cfg = ModelConfig(block=block, vocab_size=1024, d_model=64, n_layers=4, n_heads=4, d_ff=128, max_seq_len=64)
    built = count_parameters(build_model(cfg))
    # SAS-P has no value and projection matrices, so the rough count (every block's four) exceeds it a little;
    # the others add only norms, biases and positions to it
    assert 0.85 < cfg.rough_parameters / built <= (1.15 if block == "sas-p" else 1.0)
    assert ModelConfig(**{**cfg.to_dict(), "n_layers": 8}).rough_parameters > cfg.rough_parameters
