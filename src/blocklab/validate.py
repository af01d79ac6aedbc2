"""The ValueError shapes every config field uses: the field, the bad value and the valid choices."""

from __future__ import annotations


def choice(field: str, value, choices) -> None:
    """Raise the one ValueError shape every config field uses: field, bad value, valid choices."""
    if value not in choices:
        raise ValueError(f"{field}={value!r} is not valid; choose one of: {', '.join(map(str, choices))}")


def positive(field: str, value, kind=int) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ValueError(f"{field}={value!r} is not valid; it must be a positive {kind.__name__}")
