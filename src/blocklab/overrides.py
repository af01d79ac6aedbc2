"""The dotted command-line overrides, `--SECTION.KEY VALUE` or `--SECTION.KEY=VALUE`: their one parser.

`split_overrides` pulls them out of a command line before argparse sees it (argparse would take
an override's value for a positional argument); `parse_overrides` turns them into
{section: {key: value}}, a key's dashes read as underscores. Turning a value into its field's type
is the caller's (training/config.py `coerce`): this module knows the syntax, not the fields.
"""

from __future__ import annotations

from collections.abc import Callable

from blocklab.errors import UserError

SECTIONS = ("model", "data", "train")  # the [sections] of a run's config, in their TOML order


def is_override(token: str) -> bool:
    """Whether a command-line token starts an override: --SECTION.KEY[=VALUE] of a known section."""
    return token.startswith("--") and "." in token and token[2:].split(".", 1)[0] in SECTIONS


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the other arguments, the override tokens): each override with its value, in order."""
    rest, over, i = [], [], 0
    while i < len(argv):
        if is_override(argv[i]):
            n = 1 if "=" in argv[i] else 2  # the value is the next token unless given with '='
            over += argv[i : i + n]
            i += n
        else:
            rest.append(argv[i])
            i += 1
    return rest, over


def parse_overrides(tokens: list[str], coerce: Callable[[str, str, str], object] | None = None) -> dict:
    """['--model.block', 'sas-p', '--train.lr=1e-3'] -> {'model': {'block': 'sas-p'}, 'train': {'lr': '1e-3'}}.

    Values stay strings unless `coerce(section, key, raw)` converts them; every token must be part of
    an override, anything else is a UserError."""
    out: dict = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or "." not in tok:
            raise UserError(f"unrecognised argument {tok!r}; overrides look like --model.block sas-p")
        name, eq, value = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(tokens):
                raise UserError(f"--{name} needs a value")
            value, i = tokens[i + 1], i + 1
        section, _, key = name.partition(".")
        if section not in SECTIONS:
            raise UserError(f"unknown config section in --{name}; valid: {', '.join(SECTIONS)}")
        key = key.replace("-", "_")
        out.setdefault(section, {})[key] = coerce(section, key, value) if coerce else value
        i += 1
    return out
