"""Documents, document streams and the deterministic train/validation split.

A corpus reaches the pipeline as a `DocStream`: scanned once up front (a content
fingerprint for the cache key, counts for the log), then read as often as the build
needs (tokenizer sample, encoding), one document at a time, so no source has to fit in
memory. Documents are the unit of the split: no file leaks half into training and half
into validation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

SPLIT_SALT = b"blocklab-split-v1\x00"


@dataclass(frozen=True)
class Document:
    name: str  # relative path, "line N" or "row N": the split hashes it
    text: str


def decode_text(data: bytes) -> str | None:
    """UTF-8 text, or None for binary / undecodable bytes. A NUL byte never occurs in
    source code or prose but is common in binaries that happen to decode as UTF-8."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def unit_hash(name: str, salt: bytes = SPLIT_SALT) -> float:
    """A document's position in [0, 1), from its name only: adding or removing other
    documents never moves a document between train and validation."""
    digest = hashlib.sha256(salt + name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SplitRule:
    """Validation = the documents whose name hashes below `val_fraction`. Given every
    name (one pass, constant memory), a corpus so small that this leaves a side empty
    gets its lowest-hash document moved to validation, or its highest-hash one back to
    training. Without the names (a stream of unknown length) the plain rule applies."""

    def __init__(self, val_fraction: float, names: Iterable[str] | None = None):
        self.val_fraction = val_fraction
        self.force_val = self.force_train = None
        if names is None:
            return
        lo = hi = None  # (hash, name)
        n = n_val = 0
        for name in names:
            h = unit_hash(name)
            n += 1
            n_val += h < val_fraction
            if lo is None or h < lo[0]:
                lo = (h, name)
            if hi is None or h > hi[0]:
                hi = (h, name)
        if n >= 2 and n_val == 0:
            self.force_val = lo[1]
        elif n >= 2 and n_val == n:
            self.force_train = hi[1]

    def is_val(self, name: str) -> bool:
        if name == self.force_val:
            return True
        if name == self.force_train:
            return False
        return unit_hash(name) < self.val_fraction


@dataclass
class DocStream:
    """A corpus, readable any number of times as (train, val) document iterators.

    `fingerprint` is a hash of the content (documents' names and bytes) or, for a hub
    dataset we cannot read twice cheaply, of its identity and revision; together with
    `settings` (the source options that change what is read) it keys the cache.
    `read(part)` yields the documents of "train", "val" or "all", in corpus order."""

    kind: str
    root: str  # what the user pointed at, for messages
    fingerprint: str
    read: Callable[[str], Iterator[Document]] = field(repr=False)
    settings: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)  # counts known from the scan, for stats and the log
    train_bytes: int | None = None  # None: unknown until read (the tokenizer sample takes a prefix)

    def docs(self, part: str) -> Iterator[Document]:
        assert part in ("train", "val", "all")
        return self.read(part)


class Fingerprint:
    """sha256 over each document's name and content digest, length-prefixed so that no
    two different corpora serialise alike."""

    def __init__(self):
        self._h = hashlib.sha256(b"blocklab-corpus-v2\x00")

    def add(self, name: str, digest: bytes) -> None:
        raw = name.encode("utf-8")
        self._h.update(len(raw).to_bytes(8, "little") + raw + digest)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def fingerprint_docs(docs: Iterable[Document]) -> str:
    fp = Fingerprint()
    for doc in docs:
        fp.add(doc.name, hashlib.sha256(doc.text.encode("utf-8")).digest())
    return fp.hexdigest()
