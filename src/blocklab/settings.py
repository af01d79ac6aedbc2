"""One home per setting: each config field is declared once, with its type (the annotation), default,
allowed values or range, unit and a one-line description.

`setting(...)` returns a `dataclasses.field` that carries a `Setting` in its metadata. `validate(obj, section)`
checks every such field of a config object from it, with the one error shape every config uses
(`train.lr=0 is not valid; it must be a positive number`; a setting of a command's own option is named as
typed: `--reps 0 is not valid; ...`), raised as ConfigError. `entries(cls, section)` yields what `--help` and
the README's options table print, and `add_option` an argparse option from it, so none can drift from the real
defaults. Cross-field checks (grad_accum divides batch_size, say) stay in each class's `__post_init__`, after
`validate`.

Types: bool, int, float, str and their unions, `X | None`, lists of them (`list[int]`, `tuple[str, ...]`: a
list or tuple whose every item is checked), and any other class (an instance of it).

Torch-free and near the bottom of the layers: every config module imports it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator

from blocklab.errors import ConfigError

KEY = "blocklab.setting"
BOOL_WORDS = "choose one of: True, False (true or false in TOML and on the command line)"


@dataclasses.dataclass(frozen=True)
class Setting:
    help: str
    unit: str | None = None
    # A tuple, or a function returning one when the valid values are only known at run time (registered blocks).
    choices: tuple | Callable[[], tuple] | None = None
    shown_choices: tuple | Callable[[], tuple] | None = None  # what --help lists, when not every valid value
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False
    # What the default stands for when it is computed from other settings ("5% of train.steps"); a function
    # when the text depends on run-time facts (each block's own beta_FF).
    derived: str | Callable[[], str] | None = None
    expected: str | None = None  # the error's "it must be ..." phrase, when the generated one says too little
    nonempty: bool = False  # a list: refuse an empty one
    distinct: bool = False  # a list: refuse an item given twice
    # The command-line option that sets it (`--peak-size`), where a command builds its options from these
    # declarations; errors name it as typed there.
    option: str | None = None
    # Whether the setting means anything for a config, given its section's values by name (a block-only knob:
    # `lambda c: c["block"] == "laurel"`); None: always. What a run's trackers and the report list skips the rest.
    applies: Callable[[typing.Mapping], bool] | None = None

    def valid_choices(self) -> tuple | None:
        return _call(self.choices)

    def listed_choices(self) -> tuple | None:
        return _call(self.shown_choices) if self.shown_choices is not None else self.valid_choices()


def _call(x):
    return tuple(x()) if callable(x) else x


def setting(
    default=dataclasses.MISSING,
    *,
    help: str,
    unit: str | None = None,
    choices: tuple | Callable[[], tuple] | None = None,
    shown_choices: tuple | Callable[[], tuple] | None = None,
    min: float | None = None,
    max: float | None = None,
    min_exclusive: bool = False,
    max_exclusive: bool = False,
    derived: str | Callable[[], str] | None = None,
    expected: str | None = None,
    nonempty: bool = False,
    distinct: bool = False,
    option: str | None = None,
    applies: Callable[[typing.Mapping], bool] | None = None,
    default_factory=dataclasses.MISSING,
):
    """A dataclass field whose metadata is everything validation and help need to know about it."""
    if not help or not help.strip() or "\n" in help:
        raise ValueError("a setting needs a one-line help text")
    if default is None and derived is None:
        raise ValueError(f"setting(None, help={help!r}) must say in derived= what None stands for")
    meta = Setting(
        help,
        unit,
        choices,
        shown_choices,
        min,
        max,
        min_exclusive,
        max_exclusive,
        derived,
        expected,
        nonempty,
        distinct,
        option,
        applies,
    )
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEY: meta})


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


class Kind(typing.NamedTuple):
    """What an annotation allows: `list[int] | None` -> Kind((int,), optional=True, sequence=True)."""

    types: tuple[type, ...]  # the value's types; a list's: each item's
    optional: bool  # None is valid
    sequence: bool  # a list (or tuple) of items


def _union(hint) -> tuple:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _kind(hint) -> Kind:
    args = _union(hint)
    optional = type(None) in args
    args = tuple(a for a in args if a is not type(None))
    sequence = len(args) == 1 and typing.get_origin(args[0]) in (list, tuple)
    if sequence:
        args = tuple(t for a in typing.get_args(args[0]) if a is not Ellipsis for t in _union(a))
    # A generic class (dict[str, dict]) is checked as its class.
    return Kind(tuple(typing.get_origin(a) or a for a in args), optional, sequence)


def _number(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def show(value) -> str:
    """A value as a TOML file or the command line spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else show(v) for v in value) + "]"
    return str(value)


def _range(s: Setting, integer: bool, plural: bool = False) -> str:
    word = "integer" if integer else "number"
    noun = f"{word}s" if plural else f"an {word}" if integer else f"a {word}"
    lo, hi = s.min, s.max
    if (
        hi is None
        and lo is not None
        and ((lo == 0 and s.min_exclusive) or (integer and lo == 1 and not s.min_exclusive))
    ):
        return f"positive {word}s" if plural else f"a positive {word}"
    if lo is not None and hi is not None:
        return (
            f"{noun} in {'(' if s.min_exclusive else '['}{_number(lo)}, {_number(hi)}{')' if s.max_exclusive else ']'}"
        )
    if lo is not None:
        return f"{noun} {'>' if s.min_exclusive else '>='} {_number(lo)}"
    if hi is not None:
        return f"{noun} {'<' if s.max_exclusive else '<='} {_number(hi)}"
    return noun


SCALARS = (bool, int, float, str)
PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


def _items(s: Setting, kinds: tuple[type, ...]) -> str:
    """What each item of a valid list is: "positive integers", "values among: a, b"."""
    choices = s.valid_choices()
    if choices is not None:
        return f"values among: {', '.join(map(show, choices))}"
    if set(kinds) <= {int, float}:
        return _range(s, float not in kinds, plural=True)
    if kinds == (str,):
        return "non-empty strings"
    names = [PLURALS.get(k, f"{k.__name__}s") for k in kinds if not (k is int and float in kinds)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def expectation(s: Setting, kinds: tuple[type, ...], optional: bool, sequence: bool = False) -> str:
    """The part of the error after "is not valid; ": what a valid value is."""
    if sequence and not s.expected:
        nonempty, distinct = "non-empty " if s.nonempty else "", "distinct " if s.distinct else ""
        return f"it must be a {nonempty}list of {distinct}{_items(s, kinds)}" + (" (or None)" if optional else "")
    choices = s.valid_choices()
    if choices is not None:
        text = f"choose one of: {', '.join(map(show, choices))}"
    elif s.expected:
        return f"it must be {s.expected}"
    elif kinds == (bool,):
        text = BOOL_WORDS
    elif float in kinds or int in kinds:
        text = f"it must be {_range(s, float not in kinds)}"
    elif str in kinds:
        text = "it must be a non-empty string"
    else:
        text = f"it must be a {' or '.join(k.__name__ for k in kinds)}"
    return text + (" (or None)" if optional and choices is None and kinds != (bool,) else "")


def _ok(value, s: Setting, kinds: tuple[type, ...]) -> bool:
    typed = (
        (bool in kinds and isinstance(value, bool))
        or (int in kinds and isinstance(value, int) and not isinstance(value, bool))
        or (float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (str in kinds and isinstance(value, str) and bool(value.strip()))
        or any(isinstance(value, k) for k in kinds if k not in SCALARS)
    )
    if not typed:
        return False
    choices = s.valid_choices()
    if choices is not None and not any(type(value) is type(c) and value == c for c in choices):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if s.min is not None and not (value > s.min if s.min_exclusive else value >= s.min):
            return False
        if s.max is not None and not (value < s.max if s.max_exclusive else value <= s.max):
            return False
    return True


def _ok_list(value, s: Setting, kinds: tuple[type, ...]) -> bool:
    if not isinstance(value, (list, tuple)) or (s.nonempty and not value):
        return False
    if not all(_ok(v, s, kinds) for v in value):
        return False
    return not s.distinct or len({repr(v) for v in value}) == len(value)


def _named(name: str, value, s: Setting, section: str | None) -> str:
    """The setting and its value as the user gave them: `train.lr=0`, or `--reps 0` for a command's option
    (a list as its comma-separated text)."""
    if s.option is None:
        return f"{section}.{name}={value!r}" if section else f"{name}={value!r}"
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return f"{s.option} {value!r}"


def validate(obj, section: str | None = None) -> None:
    """Check every setting of a config object against its declaration; the first bad one raises ConfigError
    naming it (as section.key when a section is given, as its option when it has one), its value and what
    would be valid."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        s = f.metadata.get(KEY)
        if s is None:
            continue
        kinds, optional, sequence = _kind(hints[f.name])
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        if not (_ok_list(value, s, kinds) if sequence else _ok(value, s, kinds)):
            raise ConfigError(
                f"{_named(f.name, value, s, section)} is not valid; {expectation(s, kinds, optional, sequence)}"
            )


@dataclasses.dataclass(frozen=True)
class OnlyWhere:
    """An `applies` rule: the setting means something where its section's `key` is one of `values` only. Kept as
    data (not a lambda) so that an error can name the values it applies to."""

    key: str
    values: tuple

    def __call__(self, c: typing.Mapping) -> bool:
        return c[self.key] in self.values


def only_where(key: str, *values) -> OnlyWhere:
    return OnlyWhere(key, values)


def applies(cls, name: str, values: typing.Mapping) -> bool:
    """Whether setting `name` of config class `cls` means anything in a config whose section holds `values` (its
    fields by name: an instance's, or a config file's table). A setting without an `applies` rule always does; so
    does one whose rule cannot be judged from `values` (an older config file without the key it reads)."""
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    rule = f.metadata[KEY].applies if f is not None and KEY in f.metadata else None
    if rule is None:
        return True
    try:
        return bool(rule(values))
    except (KeyError, TypeError, ValueError):
        return True


def applicable(sections: dict[str, type], config: typing.Mapping) -> dict[str, dict]:
    """{section: {name: value}} of `config` ({section: {name: value}}, a config file's tables) without the
    settings that mean nothing there (`applies`): what a run's trackers record and what a report lists."""
    return {
        section: {k: v for k, v in values.items() if section not in sections or applies(sections[section], k, values)}
        for section, values in config.items()
        if isinstance(values, typing.Mapping)
    }


class Entry(typing.NamedTuple):
    key: str  # section.name
    type: str  # "int", "float (nats)", "str or none"
    default: str  # as a TOML file spells it, or what a derived default is computed from
    description: str
    choices: tuple[str, ...]  # the values --help lists; () when the setting takes any value of its type
    derived: bool  # the default is computed from other settings or facts: `default` says from what


def _type_text(kind: Kind, unit: str | None) -> str:
    text = ("list of " if kind.sequence else "") + " or ".join(k.__name__ for k in kind.types)
    text += " or none" if kind.optional else ""
    return f"{text} ({unit})" if unit else text


def default_text(f: dataclasses.Field, command_line: bool = False) -> str:
    """The default as a TOML file spells it (`[0, 1]`), or with `command_line` as an option takes it (`0,1`);
    what it is computed from when derived; "required" when there is none."""
    s: Setting = f.metadata[KEY]
    if s.derived is not None:
        return s.derived() if callable(s.derived) else s.derived
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if command_line and isinstance(value, (list, tuple)):
        return ",".join(map(show, value)) or "none"
    return show(value)


def entries(cls, section: str) -> Iterator[Entry]:
    """One Entry per setting of a config class, in declaration order."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        s = f.metadata.get(KEY)
        if s is None:
            continue
        choices = s.listed_choices()
        yield Entry(
            f"{section}.{f.name}",
            _type_text(_kind(hints[f.name]), s.unit),
            default_text(f),
            s.help,
            tuple(map(show, choices)) if choices is not None else (),
            s.derived is not None,
        )


def help_text(sections: dict[str, type]) -> str:
    """Every setting of every section for `--help`: the option, its type and true default (and its choices),
    then its description."""
    out = []
    for section, cls in sections.items():
        out.append(f"  {section}.*")
        for e in entries(cls, section):
            line = f"    --{e.key:<31} {e.type}, default: {e.default}"
            if e.choices:
                line += f"; one of: {', '.join(e.choices)}"
            out += [line, f"        {e.description}"]
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(sections: dict[str, type]) -> str:
    """The options reference of the README: one row per setting."""
    rows = ["| option | type | default | description |", "|---|---|---|---|"]
    for section, cls in sections.items():
        for e in entries(cls, section):
            desc = e.description + (f"; one of: {', '.join(f'`{c}`' for c in e.choices)}" if e.choices else "")
            default = e.default if e.derived else f"`{e.default}`"
            rows.append(f"| `{e.key}` | {_cell(e.type)} | {_cell(default)} | {_cell(desc)} |")
    return "\n".join(rows) + "\n"


def add_option(parser, cls, name: str, **kwargs) -> None:
    """The argparse option of `cls`'s setting `name`, from its declaration: its flag (`option`), its help (the
    description and the default as the option takes it) and, for a value among choices, the metavar. A switch
    (a bool) is store_true. The value stays None unless given, so that the class's own default applies;
    `kwargs` (a metavar, say) go to add_argument."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    s: Setting = f.metadata[KEY]
    kind = _kind(_hints(cls)[name])
    if kind.types == (bool,) and not kind.sequence:
        kwargs.setdefault("action", "store_true")
        text = s.help
    else:
        text = f"{s.help} (default: {default_text(f, command_line=True)})"
        choices = None if kind.sequence else s.listed_choices()
        if choices is not None:
            kwargs.setdefault("metavar", "{" + ",".join(map(show, choices)) + "}")
    parser.add_argument(s.option, default=None, help=text.replace("%", "%%"), **kwargs)
