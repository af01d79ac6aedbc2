"""Reading a corpus into documents, and the deterministic train/validation split.

A document is one file (stdlib, folder, text file) or one JSON line. Documents are the
unit of the split, so no file leaks half into training and half into validation.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from blocklab.data.config import DataConfig
from blocklab.errors import UserError

# Folders of the standard library that hold its test suite (test, tests, idle_test, ...)
# or third-party code: neither is "the standard library source" we want to model.
STDLIB_EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True)
class Document:
    name: str  # relative path, or "line N" for JSON lines: the split hashes it
    text: str


@dataclass
class LoadedCorpus:
    kind: str  # "stdlib" | "folder" | "file" | "jsonl"
    root: str  # what the user pointed at, for messages
    docs: list[Document]
    skipped: int  # files that are not UTF-8 text
    empty: int  # empty files / lines with empty text: nothing to learn from


def _decode_text(data: bytes) -> str | None:
    """UTF-8 text, or None for binary / undecodable bytes. A NUL byte never occurs in
    source code or prose but is common in binaries that happen to decode as UTF-8."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_files(root: Path, rel_paths: list[str], kind: str, source: str, log: Callable) -> LoadedCorpus:
    docs, skipped, empty = [], 0, 0
    for rel in rel_paths:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            skipped += 1
            continue
        if not data:
            empty += 1
            continue
        text = _decode_text(data)
        if text is None:
            skipped += 1
            continue
        docs.append(Document(rel, text))
    if skipped:
        # One line for all of them: a folder with a thousand images must not flood the log.
        log(f"warning: skipped {skipped} file(s) in {source} that are not UTF-8 text "
            "(binary, undecodable or unreadable)")
    return LoadedCorpus(kind, source, docs, skipped, empty)


def _walk(root: Path, keep_dir: Callable[[str], bool], keep_file: Callable[[str], bool]) -> list[str]:
    """Relative POSIX paths under root, sorted so the corpus (and its hash) does not
    depend on the file system's listing order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if keep_dir(d)]
        rel_dir = Path(dirpath).relative_to(root)
        out.extend((rel_dir / f).as_posix() for f in filenames if keep_file(f))
    return sorted(out)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _load_stdlib(log: Callable) -> LoadedCorpus:
    root = stdlib_root()
    rel = _walk(root, lambda d: d not in STDLIB_EXCLUDED_DIRS, lambda f: f.endswith(".py"))
    if not rel:
        raise UserError(f"the standard library at {root} has no .py files (is this a stripped Python install?)")
    return _read_files(root, rel, "stdlib", f"the standard library ({root})", log)


def _load_folder(root: Path, pattern: str | None, log: Callable) -> LoadedCorpus:
    if pattern is None:
        # Hidden entries (.git, .venv, editor files) are version-control and tool state,
        # not the user's text; __pycache__ holds bytecode.
        rel = _walk(root, lambda d: not d.startswith(".") and d != "__pycache__", lambda f: not f.startswith("."))
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
    corpus = _read_files(root, rel, "folder", str(root), log)
    if not corpus.docs:
        raise UserError(f"data folder {root} has no non-empty UTF-8 text files ({corpus.skipped} skipped)")
    return corpus


def _load_text_file(path: Path) -> LoadedCorpus:
    data = _read_bytes(path)
    if not data:
        raise UserError(f"data file {path} is empty")
    text = _decode_text(data)
    if text is None:
        raise UserError(f"data file {path} is not UTF-8 text")
    return LoadedCorpus("file", str(path), [Document(path.name, text)], 0, 0)


def _load_jsonl(path: Path) -> LoadedCorpus:
    data = _read_bytes(path)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path} line {line}: not valid UTF-8") from None
    docs, empty = [], 0
    for n, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path} line {n}: invalid JSON ({e.msg})") from None
        if not isinstance(record, dict) or "text" not in record:
            raise UserError(f'{path} line {n}: no "text" field')
        if not isinstance(record["text"], str):
            raise UserError(f'{path} line {n}: "text" is not a string')
        if record["text"]:
            docs.append(Document(f"line {n}", record["text"]))
        else:
            empty += 1
    if not docs:
        raise UserError(f"{path} has no documents (no non-empty \"text\" lines)")
    return LoadedCorpus("jsonl", str(path), docs, 0, empty)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read data file {path}: {e.strerror}") from None


def load_corpus(cfg: DataConfig, log: Callable = print) -> LoadedCorpus:
    """Read the configured source into documents; every bad input is a one-line UserError."""
    if cfg.source == "stdlib":
        if cfg.glob is not None:
            raise UserError("data.glob applies to a folder source, not to 'stdlib'")
        return _load_stdlib(log)
    path = Path(cfg.source).expanduser()
    if not path.exists():
        raise UserError(
            f"data source {cfg.source!r} does not exist (expected 'stdlib', a text file, a folder or a .jsonl file)"
        )
    if path.is_dir():
        return _load_folder(path, cfg.glob, log)
    if cfg.glob is not None:
        raise UserError(f"data.glob applies to a folder source, but {cfg.source!r} is a file")
    if path.suffix.lower() == ".jsonl":
        return _load_jsonl(path)
    return _load_text_file(path)


# --- split ---------------------------------------------------------------------------

def _unit_hash(name: str) -> float:
    """A document's position in [0, 1), from its name only: adding or removing other
    files never moves a document between train and validation."""
    digest = hashlib.sha256(b"blocklab-split-v1\x00" + name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _cut_single(doc: Document, val_fraction: float) -> tuple[list[Document], list[Document]]:
    """A one-document corpus (a single text file) cannot be split by file: keep its
    last `val_fraction` for validation, cut at a line start where there is one."""
    text = doc.text
    if len(text) < 2:
        raise UserError(f"corpus is too small to split into training and validation ({len(text)} character)")
    target = min(max(int(len(text) * (1.0 - val_fraction)), 1), len(text) - 1)
    nl = text.rfind("\n", 0, target)  # prefer a line boundary at or before the target,
    cut = nl + 1 if nl + 1 > target // 2 else target  # unless it would move the cut far
    return [Document(doc.name + "#train", text[:cut])], [Document(doc.name + "#val", text[cut:])]


def split_documents(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    """Deterministic split by document, with at least one document on each side."""
    if len(docs) == 1:
        return _cut_single(docs[0], val_fraction)
    h = [_unit_hash(d.name) for d in docs]
    is_val = [x < val_fraction for x in h]
    if not any(is_val):  # small corpora: the lowest-hash document goes to validation
        is_val[min(range(len(docs)), key=h.__getitem__)] = True
    if all(is_val):
        is_val[max(range(len(docs)), key=h.__getitem__)] = False
    train = [d for d, v in zip(docs, is_val) if not v]
    val = [d for d, v in zip(docs, is_val) if v]
    return train, val
