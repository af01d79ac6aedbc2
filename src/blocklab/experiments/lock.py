"""One `compare` at a time in a sweep's folder: DIR/.compare.lock, held with flock while the sweep runs.

Two processes training the same runs would write the same checkpoints and metrics, whichever launcher ran
them; the second is refused in one line naming the first. The lock is the kernel's (fcntl.flock): it goes
with the process that held it, so a compare that was killed leaves no stale lock behind, and on Linux's NFS
client it is taken on the server, so a compare on another machine that mounts the folder sees it too. The
file stays in the folder (an empty lock file is not a sweep's content: compare ignores it).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from blocklab.atomic import writable_dir
from blocklab.errors import UserError

LOCK = ".compare.lock"

_held: dict[Path, list] = {}  # folder -> [open lock file, depth]: the same process may enter again


@contextlib.contextmanager
def sweep_lock(out: str | Path):
    """Hold DIR's lock for the block; UserError (one line) when another process holds it. Reentrant within one
    process (the command line holds it around the sweep, its probes and its report; run_sweep holds it too)."""
    out = writable_dir(out, "--out folder").resolve()
    if out in _held:
        _held[out][1] += 1
        try:
            yield out
        finally:
            _held[out][1] -= 1
        return
    handle = _take(out / LOCK)
    _held[out] = [handle, 1]
    try:
        yield out
    finally:
        del _held[out]
        handle.close()  # closing the file releases the lock


def _take(path: Path):
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock, as before
        return open(os.devnull)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"{path.parent} is in use by another compare ({holder}); wait for it to end, or choose another --out"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {os.uname().nodename if hasattr(os, 'uname') else 'this machine'}\n")
    handle.flush()
    return handle


def check_folder(out: Path, name: str) -> None:
    """DIR can hold the sweep `name`: new, empty, or holding that sweep already, and writable; else one line.
    Cheap (no torch): compare says it before it starts anything, and run_sweep again under the lock."""
    out = Path(out)
    saved = out / "sweep.json"
    if saved.is_file():
        try:
            previous = json.loads(saved.read_text())
        except ValueError:
            raise UserError(f"{saved} is damaged (not JSON); move it away or choose another --out") from None
        if not isinstance(previous, dict) or previous.get("name") != name:
            held = previous.get("name") if isinstance(previous, dict) else None
            raise UserError(f"{out} holds the sweep {held!r}, not {name!r}; choose another --out")
    elif out.is_dir() and any(p.name != LOCK for p in out.iterdir()):
        raise UserError(f"{out} is not empty and holds no blocklab sweep; choose another --out")
    writable_dir(out, "--out folder")  # a file in the way, no permission, a full disk
