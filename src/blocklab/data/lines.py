"""UTF-8 text files read as lines: the one reader of .tsv and .jsonl data and of `blocklab translate`'s input.

A line ends at "\\n" (a "\\r" before it stays in the line: the callers strip it), and a final "\\n"
ends the last line rather than starting an empty one, so line N is the one a text editor shows as
line N, the same count as the "line N: not valid UTF-8" error's. A file that cannot be read, or
that is not UTF-8, is one UserError naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from blocklab.errors import UserError


def read_bytes(path: str | Path, what: str = "data file") -> bytes:
    """The file's bytes; `what` names it in the error ("cannot read data file PATH: REASON")."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None


def decode_utf8(data: bytes, where: str) -> str:
    """`data` as UTF-8 text; otherwise a UserError "WHERE line N: not valid UTF-8"."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{where} line {line}: not valid UTF-8") from None


def split_lines(text: str) -> list[str]:
    """The lines of `text` (see the module's docstring); "" has none."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def read_lines(path: str | Path | None, what: str = "data file") -> list[str]:
    """The lines of a UTF-8 file, or of standard input when `path` is None."""
    if path is None:
        return split_lines(decode_utf8(sys.stdin.buffer.read(), "standard input"))
    return split_lines(decode_utf8(read_bytes(path, what), str(path)))
