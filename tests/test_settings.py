"""blocklab.settings: every config field declared once, validated and described from that declaration."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from blocklab.errors import ConfigError, UserError
from blocklab.settings import entries, setting, validate

README = Path(__file__).resolve().parents[1] / "README.md"


@dataclasses.dataclass
class Toy:
    kind: str = setting("a", help="which kind", choices=("a", "b"))
    count: int = setting(1, help="how many", min=1)
    rate: float = setting(0.5, help="a share", min=0, max=1, min_exclusive=True, max_exclusive=True)
    margin: float = setting(0.1, help="a margin", unit="nats", min=0)
    limit: int | None = setting(None, help="a cap", derived="no cap", min=0)
    flag: bool = setting(False, help="a switch")
    name: str = setting("x", help="a name")
    mode: bool | str = setting("auto", help="auto or a switch", choices=("auto", True, False))

    def __post_init__(self):
        validate(self, "toy")


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(kind="c"), "toy.kind='c' is not valid; choose one of: a, b"),
        (dict(kind=None), "toy.kind=None is not valid; choose one of: a, b"),
        (dict(count=0), "toy.count=0 is not valid; it must be a positive integer"),
        (dict(count=2.0), "toy.count=2.0 is not valid; it must be a positive integer"),
        (dict(count=True), "toy.count=True is not valid; it must be a positive integer"),
        (dict(count=None), "toy.count=None is not valid; it must be a positive integer"),
        (dict(rate=0), "toy.rate=0 is not valid; it must be a number in (0, 1)"),
        (dict(rate=1.0), "toy.rate=1.0 is not valid; it must be a number in (0, 1)"),
        (dict(rate="0.5"), "toy.rate='0.5' is not valid; it must be a number in (0, 1)"),
        (dict(rate=float("nan")), "toy.rate=nan is not valid; it must be a number in (0, 1)"),
        (dict(margin=-0.1), "toy.margin=-0.1 is not valid; it must be a number >= 0"),
        (dict(limit=-1), "toy.limit=-1 is not valid; it must be an integer >= 0 (or None)"),
        (dict(limit=1.5), "toy.limit=1.5 is not valid; it must be an integer >= 0 (or None)"),
        (dict(flag="yes"), "toy.flag='yes' is not valid; choose one of: True, False"),
        (dict(flag=0), "toy.flag=0 is not valid; choose one of: True, False"),
        (dict(name=""), "toy.name='' is not valid; it must be a non-empty string"),
        (dict(name=None), "toy.name=None is not valid; it must be a non-empty string"),
        (dict(mode="sometimes"), "toy.mode='sometimes' is not valid; choose one of: auto, true, false"),
        (dict(mode=1), "toy.mode=1 is not valid; choose one of: auto, true, false"),
    ],
)
def test_every_field_is_checked_from_its_declaration(kw, message):
    with pytest.raises(ConfigError) as e:
        Toy(**kw)
    assert str(e.value).startswith(message)
    assert isinstance(e.value, ValueError) and isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_valid_values_pass_and_none_only_where_the_annotation_allows_it():
    Toy(kind="b", count=3, rate=0.999, margin=0, limit=None, flag=True, name="y", mode=False)
    Toy(margin=1, limit=0, mode=True)  # an int is a fine float


def test_a_declaration_needs_a_description_and_a_meaning_for_none():
    with pytest.raises(ValueError, match="one-line help"):
        setting(1, help=" ")
    with pytest.raises(ValueError, match="derived"):
        setting(None, help="a cap")


def test_entries_give_type_unit_default_and_description():
    rows = {e.key: e for e in entries(Toy, "toy")}
    assert rows["toy.margin"][:4] == ("toy.margin", "float (nats)", "0.1", "a margin")
    assert rows["toy.limit"].default == "no cap" and rows["toy.limit"].derived
    assert rows["toy.limit"].type == "int or none"
    assert rows["toy.kind"].choices == ("a", "b") and rows["toy.count"].choices == ()
    assert rows["toy.flag"].default == "false" and rows["toy.mode"].choices == ("auto", "true", "false")


@dataclasses.dataclass
class Lists:
    ids: list[int] = setting(default_factory=lambda: [0], help="ids", min=0, nonempty=True, distinct=True)
    names: tuple[str, ...] | None = setting(None, help="names", derived="all of them", choices=("a", "b"))
    reps: int = setting(5, help="rounds", min=1, option="--reps")
    sizes: list[int] = setting(default_factory=list, help="sizes", min=1, option="--sizes")
    table: dict = setting(default_factory=dict, help="a table")
    on: bool = setting(False, help="a switch", option="--on")

    def __post_init__(self):
        validate(self, "lists")


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(ids=[]), "lists.ids=[] is not valid; it must be a non-empty list of distinct integers >= 0"),
        (dict(ids=[1, 1]), "lists.ids=[1, 1] is not valid; it must be a non-empty list of distinct integers >= 0"),
        (dict(ids=[-1]), "lists.ids=[-1] is not valid"),
        (dict(ids=[True]), "lists.ids=[True] is not valid"),
        (dict(ids=3), "lists.ids=3 is not valid"),
        (dict(names=["c"]), "lists.names=['c'] is not valid; it must be a list of values among: a, b (or None)"),
        (dict(reps=0), "--reps 0 is not valid; it must be a positive integer"),  # as the command line spells it
        (dict(sizes=[4, 0]), "--sizes '4,0' is not valid; it must be a list of positive integers"),
        (dict(table=[]), "lists.table=[] is not valid; it must be a dict"),
    ],
)
def test_lists_options_and_other_classes_are_checked_from_their_declarations(kw, message):
    with pytest.raises(ConfigError) as e:
        Lists(**kw)
    assert str(e.value) == message or str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_a_list_takes_a_list_or_a_tuple_and_an_empty_one_where_allowed():
    v = Lists(ids=(3, 1), names=None, sizes=[], table={"a": 1})
    assert v.ids == (3, 1) and v.sizes == [] and Lists(names=("b", "a")).names == ("b", "a")


def test_entries_and_defaults_of_lists_and_required_settings():
    from blocklab.settings import default_text

    rows = {e.key: e for e in entries(Lists, "lists")}
    assert (rows["lists.ids"].type, rows["lists.ids"].default) == ("list of int", "[0]")
    assert (rows["lists.names"].type, rows["lists.names"].default) == ("list of str or none", "all of them")
    assert rows["lists.names"].choices == ("a", "b") and rows["lists.sizes"].default == "[]"
    fields = {f.name: f for f in dataclasses.fields(Lists)}
    assert default_text(fields["ids"], command_line=True) == "0"
    assert default_text(fields["sizes"], command_line=True) == "none"

    @dataclasses.dataclass
    class Needs:
        tasks: list[str] = setting(help="tasks")

    (row,) = entries(Needs, "needs")
    assert row.default == "required" and row.type == "list of str"


def test_add_option_builds_an_argparse_option_from_the_declaration():
    import argparse

    from blocklab.settings import add_option

    parser = argparse.ArgumentParser()
    for name in ("reps", "sizes", "on"):
        add_option(parser, Lists, name)
    help = {a.dest: a.help for a in parser._actions}
    assert (
        help["reps"] == "rounds (default: 5)" and help["sizes"] == "sizes (default: none)" and help["on"] == "a switch"
    )
    assert vars(parser.parse_args([])) == {"reps": None, "sizes": None, "on": None}  # the class's defaults apply
    assert vars(parser.parse_args(["--reps", "3", "--on"])) == {"reps": "3", "sizes": None, "on": True}


# ---------------------------------------------------------------------------------------------------
# The real configs


def test_every_config_field_is_declared_as_a_setting():
    from blocklab.training.config import SECTIONS

    for section, cls in SECTIONS.items():
        keys = [e.key for e in entries(cls, section)]
        assert keys == [f"{section}.{f.name}" for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(
    "section, kw, words",
    [
        ("train", dict(weight_decay="0.1"), ["train.weight_decay='0.1'", "a number >= 0"]),
        ("train", dict(seed=1.5), ["train.seed=1.5", "an integer"]),
        ("train", dict(init_from=""), ["train.init_from=''", "non-empty string"]),
        ("train", dict(steps=None), ["train.steps=None", "positive integer"]),
        ("train", dict(optimizer="lion"), ["train.optimizer='lion'", "adamw, adam, sgd"]),
        ("model", dict(beta_v="0.2"), ["beta_v='0.2'", "a number"]),
        ("model", dict(norm_eps=0), ["norm_eps=0", "positive number"]),
        ("data", dict(mask_prob=0.0), ["mask_prob=0.0", "(0, 1]"]),
        ("data", dict(vocab_size=100), ["vocab_size=100", "in [259, 4294967295]"]),
    ],
)
def test_the_real_configs_validate_from_their_declarations(section, kw, words):
    from blocklab.training.config import SECTIONS

    with pytest.raises(ConfigError) as e:
        SECTIONS[section](**kw)
    for w in words:
        assert w in str(e.value)


def test_train_help_describes_every_option_with_its_true_default():
    from blocklab.training.config import SECTIONS, describe_options

    text = describe_options()
    lines = text.splitlines()
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            i = next(i for i, line in enumerate(lines) if line.split()[:1] == [f"--{section}.{f.name}"])
            assert "default: " in lines[i] and lines[i + 1].strip() and not lines[i + 1].strip().startswith("--")
    option = {line.split()[0]: line for line in lines if line.strip().startswith("--")}
    assert option["--train.warmup_steps"].endswith("default: 5% of train.steps")
    assert "None" not in text  # a default of None is always said in words
    assert "0.1 for v-skipinit, shaped-vp, sas, sas-p" in option["--model.beta_ff"]
    assert option["--train.stall_margin"].startswith("    --train.stall_margin") and "(nats)" in text
    assert option["--train.compile"].endswith("one of: auto, true, false")
    assert re.search(r"^  sas-p +y = beta_SA SAS\(Norm\(x\)\)", text, re.M)  # the block table


def test_readme_options_table_is_the_generated_one():
    from blocklab.training.config import options_markdown

    text = README.read_text()
    start = text.index("<!-- options: generated")
    table = text[text.index("\n", start) + 1 : text.index("<!-- end of options -->")]
    assert table == options_markdown(), (
        "README's options table drifted from the settings; paste blocklab.training.config.options_markdown()"
    )


def test_readme_and_presets_do_not_send_users_to_the_spec():
    from blocklab.experiments.presets import PRESETS

    assert "SPEC" not in README.read_text()
    assert not [name for name, spec in PRESETS.items() if "SPEC" in json.dumps(spec)]


def _help(capsys, *argv) -> str:
    from blocklab.cli import main

    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def test_finetune_help_prints_its_warmup_share_once_escaped(capsys):
    text = " ".join(_help(capsys, "finetune").split())
    assert "warm-up 10%," in text and "%%" not in text


def test_bench_help_names_no_issue_numbers(capsys):
    assert "issue" not in _help(capsys, "bench").lower()
