"""Reading a corpus: which loader a `data.source` means, small in-memory sources, the split.

Big sources stream (files.py: stdlib, folders, the Python environment; hf.py: the
`datasets` library); a single text file or JSON-lines file is read whole (for a JSON-lines
file larger than memory, use `hf:FILE.jsonl`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from blocklab.data.config import DataConfig
from blocklab.data.documents import DocStream, Document, SplitRule, decode_text, fingerprint_docs
from blocklab.data.files import folder_stream, python_stream, stdlib_root, stdlib_stream
from blocklab.data.lines import read_bytes, read_lines
from blocklab.errors import UserError

__all__ = ["Document", "LoadedCorpus", "open_stream", "load_corpus", "split_documents", "stdlib_root"]


@dataclass
class LoadedCorpus:
    kind: str  # "stdlib" | "python" | "folder" | "file" | "jsonl" | "hf"
    root: str  # what the user pointed at, for messages
    docs: list[Document]
    skipped: int  # files that are not UTF-8 text
    empty: int  # empty files / lines with empty text: nothing to learn from


def _load_text_file(path: Path) -> LoadedCorpus:
    data = read_bytes(path)
    if not data:
        raise UserError(f"data file {path} is empty")
    text = decode_text(data)
    if text is None:
        raise UserError(f"data file {path} is not UTF-8 text")
    return LoadedCorpus("file", str(path), [Document(path.name, text)], 0, 0)


def json_lines(path: Path):
    """(line number, record) for each non-blank line of a JSON-lines file; a bad line is one UserError."""
    for n, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path} line {n}: invalid JSON ({e.msg})") from None


def _load_jsonl(path: Path, field: str = "text") -> LoadedCorpus:
    docs, empty = [], 0
    for n, record in json_lines(path):
        if not isinstance(record, dict) or field not in record:
            raise UserError(f'{path} line {n}: no "{field}" field (set data.text_field)')
        if not isinstance(record[field], str):
            raise UserError(f'{path} line {n}: "{field}" is not a string')
        if record[field]:
            docs.append(Document(f"line {n}", record[field]))
        else:
            empty += 1
    if not docs:
        raise UserError(f'{path} has no documents (no non-empty "{field}" lines)')
    return LoadedCorpus("jsonl", str(path), docs, 0, empty)


def _memory_stream(loaded: LoadedCorpus, val_fraction: float) -> DocStream:
    train, val = split_documents(loaded.docs, val_fraction)
    parts = {"train": train, "val": val, "all": loaded.docs}
    info = {
        "files": len(loaded.docs),
        "bytes": sum(len(d.text.encode("utf-8")) for d in loaded.docs),
        "skipped_files": loaded.skipped,
        "empty_files": loaded.empty,
    }
    return DocStream(
        loaded.kind,
        loaded.root,
        fingerprint_docs(loaded.docs),
        lambda part: iter(parts[part]),
        info=info,
        train_bytes=sum(len(d.text.encode("utf-8")) for d in train),
    )


def open_stream(cfg: DataConfig, log: Callable = print) -> DocStream:
    """The configured source as a DocStream; every bad input is a one-line UserError."""
    if cfg.glob is not None and (cfg.source in ("stdlib", "python") or cfg.source.startswith("hf:")):
        raise UserError(f"data.glob applies to a folder source, not to {cfg.source!r}")
    if cfg.source == "stdlib":
        return stdlib_stream(cfg.val_fraction, log)
    if cfg.source == "python":
        return python_stream(cfg.val_fraction, log)
    if cfg.source.startswith("hf:"):
        from blocklab.data.hf import hf_stream  # imports `datasets`: seconds, only when needed

        return _cut_if_single(hf_stream(cfg, log), cfg.val_fraction)
    path = Path(cfg.source).expanduser()
    if not path.exists():
        raise UserError(
            f"data source {cfg.source!r} does not exist (expected 'stdlib', 'python', 'hf:NAME_OR_PATH', "
            "a text file, a folder or a .jsonl file)"
        )
    if path.is_dir():
        return _cut_if_single(folder_stream(path, cfg.glob, cfg.val_fraction, log), cfg.val_fraction)
    if cfg.glob is not None:
        raise UserError(f"data.glob applies to a folder source, but {cfg.source!r} is a file")
    loaded = _load_jsonl(path, cfg.text_field) if path.suffix.lower() == ".jsonl" else _load_text_file(path)
    return _memory_stream(loaded, cfg.val_fraction)


def _cut_if_single(stream: DocStream, val_fraction: float) -> DocStream:
    """One document cannot be split by name: cut it like a single text file."""
    if stream.info.get("files") != 1:
        return stream
    info = stream.info
    loaded = LoadedCorpus(
        stream.kind, stream.root, list(stream.docs("all")), info.get("skipped_files", 0), info.get("empty_files", 0)
    )
    cut = _memory_stream(loaded, val_fraction)
    cut.info, cut.settings = {**info, **cut.info}, stream.settings
    return cut


def load_corpus(cfg: DataConfig, log: Callable = print) -> LoadedCorpus:
    """Every document of the configured source, in memory, in corpus order (for tests and
    small corpora; prepare() streams instead)."""
    stream = open_stream(cfg, log)
    docs = list(stream.docs("all"))
    return LoadedCorpus(
        stream.kind, stream.root, docs, stream.info.get("skipped_files", 0), stream.info.get("empty_files", 0)
    )


# --- split ---------------------------------------------------------------------------


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
    """Deterministic split by document (SplitRule), with at least one document on each side."""
    if len(docs) == 1:
        return _cut_single(docs[0], val_fraction)
    rule = SplitRule(val_fraction, (d.name for d in docs))
    is_val = [rule.is_val(d.name) for d in docs]
    return [d for d, v in zip(docs, is_val) if not v], [d for d, v in zip(docs, is_val) if v]
