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
