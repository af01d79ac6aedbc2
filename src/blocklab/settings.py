"""One home per setting: each config field is declared once, with its type (the annotation), default,
allowed values or range, unit and a one-line description.

`setting(...)` returns a `dataclasses.field` that carries a `Setting` in its metadata. `validate(obj, section)`
checks every such field of a config object from it, with the one error shape every config uses
(`train.lr=0 is not valid; it must be a positive number`), raised as ConfigError. `entries(cls, section)`
yields what `--help` and the README's options table print, so neither can drift from the real defaults.
Cross-field checks (grad_accum divides batch_size, say) stay in each class's `__post_init__`, after `validate`.

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
    default_factory=dataclasses.MISSING,
):
    """A dataclass field whose metadata is everything validation and help need to know about it."""
    if not help or not help.strip() or "\n" in help:
        raise ValueError("a setting needs a one-line help text")
    if default is None and derived is None:
        raise ValueError(f"setting(None, help={help!r}) must say in derived= what None stands for")
    meta = Setting(help, unit, choices, shown_choices, min, max, min_exclusive, max_exclusive, derived, expected)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEY: meta})


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _types(hint) -> tuple[tuple[type, ...], bool]:
    """(the non-None types of an annotation, whether None is allowed): `int | None` -> ((int,), True)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return tuple(a for a in args if a is not type(None)), type(None) in args
    return (hint,), False


def _number(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def show(value) -> str:
    """A value as a TOML file or the command line spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _range(s: Setting, integer: bool) -> str:
    noun = "an integer" if integer else "a number"
    lo, hi = s.min, s.max
    if (
        hi is None
        and lo is not None
        and ((lo == 0 and s.min_exclusive) or (integer and lo == 1 and not s.min_exclusive))
    ):
        return f"a positive {'integer' if integer else 'number'}"
    if lo is not None and hi is not None:
        return (
            f"{noun} in {'(' if s.min_exclusive else '['}{_number(lo)}, {_number(hi)}{')' if s.max_exclusive else ']'}"
        )
    if lo is not None:
        return f"{noun} {'>' if s.min_exclusive else '>='} {_number(lo)}"
    if hi is not None:
        return f"{noun} {'<' if s.max_exclusive else '<='} {_number(hi)}"
    return noun


def expectation(s: Setting, kinds: tuple[type, ...], optional: bool) -> str:
    """The part of the error after "is not valid; ": what a valid value is."""
    choices = s.valid_choices()
    if choices is not None:
        text = f"choose one of: {', '.join(map(show, choices))}"
    elif s.expected:
        return f"it must be {s.expected}"
    elif kinds == (bool,):
        text = BOOL_WORDS
    elif float in kinds or int in kinds:
        text = f"it must be {_range(s, float not in kinds)}"
    else:
        text = "it must be a non-empty string"
    return text + (" (or None)" if optional and choices is None and kinds != (bool,) else "")


def _ok(value, s: Setting, kinds: tuple[type, ...]) -> bool:
    typed = (
        (bool in kinds and isinstance(value, bool))
        or (int in kinds and isinstance(value, int) and not isinstance(value, bool))
        or (float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (str in kinds and isinstance(value, str) and bool(value.strip()))
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


def validate(obj, section: str | None = None) -> None:
    """Check every setting of a config object against its declaration; the first bad one raises ConfigError
    naming it (as section.key when a section is given), its value and what would be valid."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        s = f.metadata.get(KEY)
        if s is None:
            continue
        kinds, optional = _types(hints[f.name])
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        if not _ok(value, s, kinds):
            key = f"{section}.{f.name}" if section else f.name
            raise ConfigError(f"{key}={value!r} is not valid; {expectation(s, kinds, optional)}")


class Entry(typing.NamedTuple):
    key: str  # section.name
    type: str  # "int", "float (nats)", "str or none"
    default: str  # as a TOML file spells it, or what a derived default is computed from
    description: str
    choices: tuple[str, ...]  # the values --help lists; () when the setting takes any value of its type
    derived: bool  # the default is computed from other settings or facts: `default` says from what


def _type_text(kinds: tuple[type, ...], optional: bool, unit: str | None) -> str:
    text = " or ".join(k.__name__ for k in kinds) + (" or none" if optional else "")
    return f"{text} ({unit})" if unit else text


def default_text(f: dataclasses.Field) -> str:
    s: Setting = f.metadata[KEY]
    if s.derived is not None:
        return s.derived() if callable(s.derived) else s.derived
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return show(value)


def entries(cls, section: str) -> Iterator[Entry]:
    """One Entry per setting of a config class, in declaration order."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        s = f.metadata.get(KEY)
        if s is None:
            continue
        kinds, optional = _types(hints[f.name])
        choices = s.listed_choices()
        yield Entry(
            f"{section}.{f.name}",
            _type_text(kinds, optional, s.unit),
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
