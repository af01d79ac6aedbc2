"""The one error shape of a value outside a fixed list: the field, the bad value and the valid choices.

Config fields declare their choices with blocklab.settings.setting (raised there as ConfigError, a user's
mistake); this is for the checks outside a config class, such as the registry's block specs, where a bad value
is the programmer's and a ValueError keeps its traceback."""

from __future__ import annotations


def choice(field: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{field}={value!r} is not valid; choose one of: {', '.join(map(str, choices))}")
