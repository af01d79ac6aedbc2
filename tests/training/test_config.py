import pytest

from blocklab.errors import UserError
from blocklab.training.config import RunConfig, TrainConfig, load_config, parse_overrides, to_toml


def test_toml_and_overrides(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('[model]\nblock = "pre-ln"\nn_layers = 4\n[train]\nlr = 0.01\nsteps = 100\n')
    cfg = load_config(
        p, ["--model.block", "sas-p", "--train.steps=40", "--data.seq_len", "64", "--model.beta_ff", "0.2"]
    )
    assert cfg.model.block == "sas-p" and cfg.model.n_layers == 4 and cfg.model.beta_ff == 0.2
    assert cfg.train.lr == 0.01 and cfg.train.steps == 40 and cfg.train.warmup_steps == 2  # 5% default
    assert cfg.data.seq_len == 64 and cfg.model.max_seq_len == 64  # follows data.seq_len
    assert cfg.model.vocab_size == cfg.data.vocab_size


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["--model.block", "sas", "--train.compile", "true", "--data.glob", "**/*.py"])
    (tmp_path / "c.toml").write_text(to_toml(cfg))
    assert load_config(tmp_path / "c.toml").to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    "args,words",
    [
        (["--train.lr", "0"], ["train.lr", "0"]),
        (["--train.lr", "-1e-3"], ["train.lr"]),
        (["--train.steps", "10", "--train.warmup_steps", "20"], ["warmup_steps", "20"]),
        (["--train.optimizer", "lion"], ["lion", "adamw"]),
        (["--train.optimizer", "lion"], ["train.optimizer", "muon"]),
        (["--train.qk_clip", "0"], ["train.qk_clip=0.0", "positive"]),
        (["--train.qk_clip", "-1"], ["train.qk_clip=-1.0", "positive"]),
        (["--train.qk_clip", "5", "--model.block", "ngpt"], ["train.qk_clip=5.0", "'ngpt'", "nGPT normalises"]),
        (["--train.qk_clip", "5", "--model.qk_norm", "true"], ["train.qk_clip=5.0", "'pre-ln'", "QK-norm"]),
        (["--train.qk_clip", "5", "--model.block", "olmo2"], ["train.qk_clip=5.0", "'olmo2'", "QK-norm"]),
        (["--train.schedule", "step"], ["step", "inv_sqrt"]),
        (["--model.block", "gpt"], ["block", "gpt", "sas-p"]),
        (["--model.d_model", "100", "--model.n_heads", "3"], ["d_model", "n_heads"]),
        (["--model.attention_dropout", "0.1"], ["model.attention_dropout"]),  # model.dropout is an option now
        (["--model.dropout", "1.5"], ["dropout", "1.5"]),
        (["--train.steps", "ten"], ["train.steps", "ten"]),
        (["--optim.lr", "1"], ["optim"]),
        (["--data.seq_len", "512", "--model.max_seq_len", "256"], ["seq_len", "max_seq_len"]),
    ],
)
def test_bad_values_are_user_errors_naming_the_field(args, words):
    with pytest.raises(UserError) as e:
        load_config(None, args)
    for w in words:
        assert w in str(e.value)


def test_qk_clip_is_off_by_default_and_a_refusal_is_a_value_error_for_library_callers():
    assert TrainConfig().qk_clip is None and load_config(None, ["--train.qk_clip", "5"]).train.qk_clip == 5.0
    with pytest.raises(ValueError, match=r"^train.qk_clip=5.0 does not apply to model.block='hybridnorm': .*QK-norm"):
        RunConfig.from_dict({"model": {"block": "hybridnorm"}, "train": {"qk_clip": 5.0}})


def test_missing_and_invalid_config_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_config(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("[model\nblock=")
    with pytest.raises(UserError, match="TOML"):
        load_config(tmp_path / "bad.toml")


def test_train_config_defaults():
    t = TrainConfig()
    assert (t.optimizer, t.schedule, t.precision) == ("adamw", "linear", "fp32")
    assert TrainConfig(steps=100, warmup_steps=0).warmup_steps == 0
    assert parse_overrides(["--train.compile", "false"]) == {"train": {"compile": False}}
    assert isinstance(RunConfig().train, TrainConfig)


def test_train_help_lists_the_choices_of_each_option():
    from blocklab.training.config import describe_options

    text = {line.split()[0]: line for line in describe_options().splitlines() if line.strip().startswith("--")}
    assert "ngpt" in text["--model.block"] and "deepnorm" in text["--model.block"]
    assert text["--model.norm"].endswith("one of: rmsnorm, layernorm, dyt, derf")
    assert text["--model.attn_gate"].endswith("one of: false, true, headwise")
    assert "sgd" in text["--train.optimizer"] and "one of" not in text["--model.d_model"]
    assert text["--train.optimizer"].endswith("one of: adamw, adam, sgd, muon")
    help_lines = describe_options().splitlines()
    said = help_lines[help_lines.index(text["--train.optimizer"]) + 1]  # what it does, on the next line
    assert "torch.optim.Muon" in said and "RMS-matched" in said
