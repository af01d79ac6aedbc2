"""Shared fixtures: a small folder corpus made of real standard-library files."""

from __future__ import annotations

import shutil

import pytest

from blocklab.data import DataConfig, prepare
from blocklab.data.sources import stdlib_root

# Real stdlib files: small everyday modules plus every one we know holds non-ASCII text
# (re/_casefix.py, shlex.py, zipfile.py, fractions.py, ...), so the round trip covers
# multi-byte UTF-8 as it occurs in code.
SAMPLE_FILES = [
    "abc.py",
    "bisect.py",
    "colorsys.py",
    "copy.py",
    "keyword.py",
    "heapq.py",
    "getopt.py",
    "functools.py",
    "runpy.py",
    "shlex.py",
    "fractions.py",
    "zipfile.py",
    "textwrap.py",
    "re/_casefix.py",
    "encodings/koi8_t.py",
    "encodings/punycode.py",
    "sqlite3/__init__.py",
    "json/decoder.py",
    "json/encoder.py",
    "urllib/parse.py",
    "email/message.py",
    "collections/__init__.py",
    "string.py",
    "ftplib.py",
    "dataclasses.py",
]

# Text the stdlib does not show: emoji (4-byte UTF-8), CRLF and lone CR line ends, a BOM,
# tabs, trailing spaces, and the special-token spellings as ordinary text.
TRICKY_TEXT = (
    "\ufeff# -*- coding: utf-8 -*-\r\n"
    "s = 'naïve café — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🐍🚀 日本語 עברית'\r\n"
    "x = '<pad> <mask> <eod>'\rlast line without newline\t  \n\n\n   "
)


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory):
    """A folder corpus: the sample stdlib files (under their relative paths) + tricky.txt."""
    root = tmp_path_factory.mktemp("sample_corpus")
    src = stdlib_root()
    for rel in SAMPLE_FILES:
        if (src / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, root / rel)
    (root / "tricky.txt").write_bytes(TRICKY_TEXT.encode("utf-8"))
    return root


@pytest.fixture(scope="session")
def small_corpus(sample_dir, tmp_path_factory):
    """prepare() on the sample folder with a small vocabulary (fast to train)."""
    cfg = DataConfig(source=str(sample_dir), vocab_size=600, cache_dir=str(tmp_path_factory.mktemp("cache")))
    return prepare(cfg, log=lambda *a: None)


@pytest.fixture
def logs():
    """A log callable that records lines, for asserting on warnings."""
    lines: list[str] = []

    def log(*args):
        lines.append(" ".join(str(a) for a in args))

    log.lines = lines
    return log
