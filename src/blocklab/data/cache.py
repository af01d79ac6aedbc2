"""The on-disk cache of prepared corpora: content-addressed and written atomically.

An entry is a folder named after a hash of everything that determines its contents
(the documents' names and bytes, the source options, the tokenizer settings, the split,
a format version).
It is built in a temporary folder beside it and renamed into place in one step, and
`meta.json` is its last file, so a killed run leaves at most a `.tmp-*` folder, which
is never read and is removed by a later run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from blocklab.data.documents import DocStream
from blocklab.errors import UserError

# Bump when the entry layout or the way ids are produced changes: old entries then
# simply stop matching, no migration needed.
FORMAT_VERSION = 2  # 2: streamed build, unigram entropy, tokenizer sample
META = "meta.json"
TMP_PREFIX = ".tmp-"
STALE_TMP_SECONDS = 6 * 3600  # a build never takes this long; older temp dirs are debris

try:  # POSIX advisory locks; without them concurrent builders just race benignly
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def corpus_key(stream: DocStream, settings: dict) -> str:
    """sha256 over the format, the settings and the stream's content fingerprint."""
    header = {"format": FORMAT_VERSION, "kind": stream.kind, "source": stream.settings, **settings}
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(stream.fingerprint.encode())
    return h.hexdigest()


def entry_dir(root: Path, key: str) -> Path:
    return root / f"corpus-{key[:24]}"


def ensure_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the data cache folder {root}: {e.strerror}") from None
    if not os.access(root, os.W_OK):
        raise UserError(f"the data cache folder {root} is not writable (set data.cache_dir or $BLOCKLAB_CACHE)")


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())[:40] or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def clean_stale_tmp(root: Path) -> int:
    """Remove temporary folders of builds that died: their process is gone (same host),
    or they are very old (another host on a shared file system). Returns how many."""
    removed, host = 0, _host_tag()
    for p in root.glob(TMP_PREFIX + "*"):
        m = re.fullmatch(re.escape(TMP_PREFIX) + r"[0-9a-f]+-([A-Za-z0-9_]+)-(\d+)-[0-9a-f]+", p.name)
        try:
            age = time.time() - p.stat().st_mtime
        except OSError:
            continue
        dead = m is not None and m.group(1) == host and not _pid_alive(int(m.group(2)))
        if dead or age > STALE_TMP_SECONDS or m is None:
            shutil.rmtree(p, ignore_errors=True)
            removed += 1
    return removed


@contextlib.contextmanager
def build_lock(root: Path, key: str) -> Iterator[None]:
    """Serialise builders of the same entry (e.g. every rank under torchrun): the first
    builds, the others wait and then find a cache hit. The kernel drops the lock when a
    process dies, so a killed builder never blocks anyone."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(root / f".lock-{key[:24]}", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_meta(entry: Path, key: str) -> dict | None:
    """The entry's metadata if it is complete and is the entry for `key`, else None."""
    try:
        meta = json.loads((entry / META).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION or meta.get("key") != key:
        return None
    for name, size in meta.get("files", {}).items():
        try:
            if (entry / name).stat().st_size != size:
                return None
        except OSError:
            return None
    return meta


def discard(entry: Path) -> None:
    """Move an untrusted entry out of the way first (one rename), then delete it."""
    trash = entry.with_name(f"{TMP_PREFIX}{secrets.token_hex(4)}-{_host_tag()}-{os.getpid()}-0")
    try:
        os.replace(entry, trash)
    except OSError:
        trash = entry
    shutil.rmtree(trash, ignore_errors=True)


def write_entry(root: Path, key: str, fill: Callable[[Path], dict], trust_existing: bool = True) -> dict:
    """Build an entry: `fill(tmp)` writes the data files into a temporary folder and
    returns the metadata; we record file sizes, write meta.json last, fsync, then rename
    the folder into place. Any failure (or Ctrl-C) removes the temporary folder.

    If a complete entry appeared meanwhile (a builder on another host of a shared file
    system, where the lock may not reach), it wins and ours is dropped, unless
    `trust_existing` is False (the existing entry was found damaged)."""
    tmp = root / f"{TMP_PREFIX}{key[:16]}-{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    final = entry_dir(root, key)
    try:
        meta = fill(tmp)
        meta.update(format=FORMAT_VERSION, key=key)
        meta["files"] = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        for p in tmp.iterdir():  # data must reach the disk before the rename publishes it
            _fsync(p)
        with open(tmp / META, "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():
            other = read_meta(final, key) if trust_existing else None
            if other is not None:
                shutil.rmtree(tmp, ignore_errors=True)
                return other
            discard(final)  # an untrusted leftover
        try:
            os.replace(tmp, final)
        except OSError:  # lost a race to another builder: use its entry if it is whole
            other = read_meta(final, key)
            if other is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return other
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())
