from pathlib import Path

import pytest

from blocklab.data import ConfigError, DataConfig
from blocklab.data.config import MIN_VOCAB_SIZE, cache_root
from blocklab.errors import UserError


def test_defaults_are_valid():
    cfg = DataConfig()
    assert (cfg.source, cfg.glob, cfg.vocab_size, cfg.seq_len) == ("stdlib", None, 8192, 256)
    assert (cfg.mask_prob, cfg.val_fraction, cfg.cache_dir) == (0.15, 0.02, None)
    assert (cfg.text_field, cfg.hf_config, cfg.split, cfg.streaming) == ("text", None, "train", False)
    assert (cfg.src_lang, cfg.tgt_lang) == ("de", "en")


@pytest.mark.parametrize(
    "field, value",
    [
        ("vocab_size", MIN_VOCAB_SIZE - 1),  # no room for 256 bytes + 3 specials
        ("vocab_size", 0),
        ("vocab_size", 8192.0),
        ("vocab_size", True),
        ("seq_len", 0),
        ("seq_len", -5),
        ("mask_prob", 0.0),
        ("mask_prob", 1.5),
        ("mask_prob", "0.15"),
        ("val_fraction", 0.0),
        ("val_fraction", 1.0),
        ("source", ""),
        ("glob", ""),
        ("cache_dir", ""),
        ("text_field", ""),
        ("text_field", 3),
        ("hf_config", ""),
        ("split", " "),
        ("src_lang", ""),
        ("tgt_lang", None),
        ("streaming", "yes"),
        ("tokenizer_sample_mb", 0),
        ("tokenizer_sample_mb", -1.0),
    ],
)
def test_bad_field_is_a_value_error_naming_it(field, value):
    with pytest.raises(ValueError) as info:
        DataConfig(**{field: value})
    msg = str(info.value)
    assert field in msg and repr(value) in msg and "\n" not in msg
    # the CLI prints UserErrors as one line, so config errors must be both
    assert isinstance(info.value, UserError) and isinstance(info.value, ConfigError)


def test_smallest_vocab_is_accepted():
    assert DataConfig(vocab_size=MIN_VOCAB_SIZE).vocab_size == 259


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("BLOCKLAB_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root(DataConfig(cache_dir=str(tmp_path / "cfg"))) == tmp_path / "cfg"
    assert cache_root(DataConfig()) == tmp_path / "env"
    monkeypatch.delenv("BLOCKLAB_CACHE")
    assert cache_root(DataConfig()) == tmp_path / "xdg" / "blocklab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root(DataConfig()) == Path.home() / ".cache" / "blocklab"


def test_new_fields_work_as_command_line_overrides():
    from blocklab.training.config import load_config

    cfg = load_config(
        None,
        [
            "--data.text_field",
            "content",
            "--data.hf_config",
            "python",
            "--data.split",
            "validation",
            "--data.streaming",
            "true",
            "--data.src_lang",
            "fr",
            "--data.tgt_lang",
            "de",
            "--data.tokenizer_sample_mb",
            "64",
        ],
    ).data
    assert (cfg.text_field, cfg.hf_config, cfg.split, cfg.streaming) == ("content", "python", "validation", True)
    assert (cfg.src_lang, cfg.tgt_lang, cfg.tokenizer_sample_mb) == ("fr", "de", 64.0)
    assert load_config(None, ["--data.hf_config", "none"]).data.hf_config is None
