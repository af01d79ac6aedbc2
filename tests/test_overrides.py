"""blocklab.overrides: the one parser of `--SECTION.KEY VALUE` / `--SECTION.KEY=VALUE`."""

import pytest

from blocklab.errors import UserError
from blocklab.overrides import SECTIONS, is_override, parse_overrides, split_overrides


def test_split_pulls_overrides_and_their_values_out_of_a_command_line():
    argv = [
        "train",
        "cfg.toml",
        "--model.block",
        "sas-p",
        "--out",
        "d",
        "--train.lr=1e-3",
        "--resume",
        "--data.source",
        "--weird",
    ]
    rest, over = split_overrides(argv)
    assert rest == ["train", "cfg.toml", "--out", "d", "--resume"]
    # the value is the next token whatever it looks like; '=' carries its own value
    assert over == ["--model.block", "sas-p", "--train.lr=1e-3", "--data.source", "--weird"]


def test_split_leaves_unknown_sections_and_plain_options_to_argparse():
    argv = ["--foo.bar", "1", "--out", "a.b", "x.y", "--model"]
    assert split_overrides(argv) == (argv, [])
    assert split_overrides(["--train.steps"]) == ([], ["--train.steps"])  # no value: parse_overrides says so


def test_is_override():
    assert is_override("--model.block") and is_override("--train.lr=3") and is_override("--data.seq-len")
    assert not is_override("--model") and not is_override("model.block") and not is_override("--runs.x")


def test_parse_keeps_strings_reads_dashes_as_underscores_and_the_last_value_wins():
    assert parse_overrides(["--model.n-layers", "4", "--train.lr=1e-3", "--model.n_layers", "6"]) == {
        "model": {"n_layers": "6"},
        "train": {"lr": "1e-3"},
    }
    assert parse_overrides(["--train.note=a=b"]) == {"train": {"note": "a=b"}}  # only the first '=' splits
    assert parse_overrides([]) == {}


def test_parse_hands_each_value_to_coerce():
    seen = []

    def coerce(section, key, raw):
        seen.append((section, key, raw))
        return int(raw)

    assert parse_overrides(["--train.warmup-steps", "5"], coerce) == {"train": {"warmup_steps": 5}}
    assert seen == [("train", "warmup_steps", "5")]


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["sas-p"], "unrecognised argument 'sas-p'; overrides look like --model.block sas-p"),
        (["--steps", "3"], "unrecognised argument '--steps'"),
        (["--train.steps"], "--train.steps needs a value"),
        (["--optim.lr", "1"], "unknown config section in --optim.lr; valid: model, data, train"),
    ],
)
def test_parse_errors_are_one_line_user_errors(tokens, message):
    with pytest.raises(UserError) as e:
        parse_overrides(tokens)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_sections_are_the_run_configs():
    from blocklab.training.config import SECTIONS as CONFIG_SECTIONS

    assert tuple(CONFIG_SECTIONS) == SECTIONS
