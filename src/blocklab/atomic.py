"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from blocklab.errors import UserError


def write_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to a temporary file beside `path`, sync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def writable_dir(path: str | Path, what: str = "output folder") -> Path:
    """Create `path` if needed and check that files can be written in it, before any expensive work.

    Raises UserError (one line naming the path and what to do) for a path that is a file, a folder that
    cannot be created or written, or a full disk."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path} is a file, not a folder: choose another path")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-check-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        raise UserError(f"{what} {path} cannot be written ({e.strerror or e}): {_remedy(e)}") from None
    return path


def _remedy(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "free some space or choose a folder on another disk"
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return "a part of the path is a file; choose another path"
    return "choose another path or change its permissions"
