"""Corpora made of files: the standard library, a user's folder, the whole Python environment.

A scan reads every candidate file once (hash for the fingerprint, UTF-8 check), keeping
only names, paths and digests; the build reads the files again one at a time, so memory
does not grow with the corpus. A file whose bytes changed between the two reads stops
the build: the cache entry would not match its key.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from blocklab.data.documents import DocStream, Document, Fingerprint, SplitRule, decode_text
from blocklab.errors import UserError

# Folders of the standard library that hold its test suite (test, tests, idle_test, ...)
# or third-party code: neither is "the standard library source" we want to model.
STDLIB_EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}

# `source = "python"`. Left out: test folders and test modules (test_*.py, *_test.py,
# conftest.py): generated cases and fixtures, not the library code we want to model;
# files over 1 MB: in an installed environment those are generated tables (unicode
# data, parser tables, op registries), not human-written code.
PYTHON_MAX_FILE_BYTES = 1_000_000


def _is_python_test_file(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


@dataclass(frozen=True)
class _File:
    name: str
    path: Path
    digest: bytes
    size: int


def walk(root: Path, keep_dir: Callable[[str], bool], keep_file: Callable[[str], bool]) -> list[str]:
    """Relative POSIX paths under root, sorted so the corpus (and its hash) does not
    depend on the file system's listing order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if keep_dir(d)]
        rel_dir = Path(dirpath).relative_to(root)
        out.extend((rel_dir / f).as_posix() for f in filenames if keep_file(f))
    return sorted(out)


def scan_files(
    entries: list[tuple[str, Path]],
    kind: str,
    source: str,
    val_fraction: float,
    log: Callable,
    dedupe: bool = False,
    max_bytes: int | None = None,
) -> DocStream:
    """A DocStream over `entries` (document name, path), in the given order."""
    kept: list[_File] = []
    fp, seen = Fingerprint(), set()
    info = {"skipped_files": 0, "empty_files": 0, "duplicate_files": 0, "large_files": 0, "bytes": 0}
    for name, path in entries:
        try:
            if max_bytes is not None and path.stat().st_size > max_bytes:
                info["large_files"] += 1
                continue
            data = path.read_bytes()
        except OSError:
            info["skipped_files"] += 1
            continue
        if not data:
            info["empty_files"] += 1
            continue
        if decode_text(data) is None:
            info["skipped_files"] += 1
            continue
        digest = hashlib.sha256(data).digest()
        if dedupe and digest in seen:
            info["duplicate_files"] += 1
            continue
        seen.add(digest)
        fp.add(name, digest)
        kept.append(_File(name, path, digest, len(data)))
        info["bytes"] += len(data)
    if info["skipped_files"]:
        # One line for all of them: a folder with a thousand images must not flood the log.
        log(
            f"warning: skipped {info['skipped_files']} file(s) in {source} that are not UTF-8 text "
            "(binary, undecodable or unreadable)"
        )
    info["files"] = len(kept)
    rule = SplitRule(val_fraction, (f.name for f in kept))

    def read(part: str) -> Iterator[Document]:
        want_val = part == "val"
        for f in kept:
            if part != "all" and rule.is_val(f.name) != want_val:
                continue
            try:
                data = f.path.read_bytes()
            except OSError as e:
                raise UserError(f"cannot read {f.path} while preparing the corpus: {e.strerror}") from None
            if hashlib.sha256(data).digest() != f.digest:
                raise UserError(f"{f.path} changed while the corpus was being prepared; run again")
            yield Document(f.name, data.decode("utf-8"))

    train_bytes = sum(f.size for f in kept if not rule.is_val(f.name))
    return DocStream(kind, source, fp.hexdigest(), read, info=info, train_bytes=train_bytes)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_stream(val_fraction: float, log: Callable) -> DocStream:
    root = stdlib_root()
    rel = walk(root, lambda d: d not in STDLIB_EXCLUDED_DIRS, lambda f: f.endswith(".py"))
    if not rel:
        raise UserError(f"the standard library at {root} has no .py files (is this a stripped Python install?)")
    return scan_files([(r, root / r) for r in rel], "stdlib", f"the standard library ({root})", val_fraction, log)


def folder_stream(root: Path, pattern: str | None, val_fraction: float, log: Callable) -> DocStream:
    if pattern is None:
        # Hidden entries (.git, .venv, editor files) are version-control and tool state,
        # not the user's text; __pycache__ holds bytecode.
        rel = walk(root, lambda d: not d.startswith(".") and d != "__pycache__", lambda f: not f.startswith("."))
        if not rel:
            raise UserError(f"data folder {root} has no files")
    else:
        try:
            matches = root.glob(pattern)
            rel = sorted(p.relative_to(root).as_posix() for p in matches if p.is_file())
        except (ValueError, NotImplementedError) as e:
            raise UserError(f"invalid glob {pattern!r} for data folder {root}: {e}") from None
        if not rel:
            raise UserError(f"glob {pattern!r} matches no files in data folder {root}")
    stream = scan_files([(r, root / r) for r in rel], "folder", str(root), val_fraction, log)
    if not stream.info["files"]:
        raise UserError(
            f"data folder {root} has no non-empty UTF-8 text files ({stream.info['skipped_files']} skipped)"
        )
    return stream


def python_roots() -> list[tuple[str, Path]]:
    """The interpreter's stdlib, purelib and platlib folders, each once (in a virtual
    environment purelib and platlib are usually the same folder)."""
    paths, out, seen = sysconfig.get_paths(), [], set()
    for label in ("stdlib", "purelib", "platlib"):
        p = Path(paths[label])
        if p.is_dir() and p.resolve() not in seen:
            seen.add(p.resolve())
            out.append((label, p))
    return out


def python_stream(val_fraction: float, log: Callable) -> DocStream:
    """Every .py file of the environment; see PYTHON_MAX_FILE_BYTES for what is left out.
    Identical files (vendored copies, re-installed packages) are kept once, the first in
    name order. Names are `label/relative path`, so the split does not depend on where
    the environment lives."""
    roots = python_roots()
    entries = []
    skip_dirs = STDLIB_EXCLUDED_DIRS  # site-packages under stdlib is walked as purelib
    for label, root in roots:
        rel = walk(
            root,
            lambda d: d not in skip_dirs and not d.startswith("."),
            lambda f: f.endswith(".py") and not _is_python_test_file(f),
        )
        entries.extend((f"{label}/{r}", root / r) for r in rel)
    where = ", ".join(f"{label} {root}" for label, root in roots)
    if not entries:
        raise UserError(f"the Python environment ({where}) has no .py files")
    stream = scan_files(
        entries,
        "python",
        f"the Python environment ({where})",
        val_fraction,
        log,
        dedupe=True,
        max_bytes=PYTHON_MAX_FILE_BYTES,
    )
    i = stream.info
    log(
        f"data: python environment ({where}): {i['files']:,} files, {i['bytes'] / 1e6:.1f} MB; left out "
        f"{i['duplicate_files']:,} duplicates, {i['large_files']:,} files over {PYTHON_MAX_FILE_BYTES / 1e6:g} MB, "
        f"{i['skipped_files']:,} not UTF-8; fingerprint {stream.fingerprint[:16]}"
    )
    return stream
