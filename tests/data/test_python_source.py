"""source = "python": the whole environment, tests left out, duplicates once, big files skipped.

A fake environment (stdlib, purelib, platlib folders in tmp) stands in for the real one
via sysconfig.get_paths, so the rules are checked on files whose fate we know.
"""

import numpy as np
import pytest

import blocklab.data.files as files_mod
from blocklab.data import DataConfig, prepare
from blocklab.data.sources import load_corpus, split_documents, stdlib_root
from blocklab.errors import UserError

from .conftest import SAMPLE_FILES

STD_FILES = [rel for rel in SAMPLE_FILES[:12] if (stdlib_root() / rel).is_file()]


LIMIT = 200_000  # stands in for the 1 MB rule: above every sample stdlib file


def _lines(n_bytes):
    text = "".join(f"x_{i} = {i}\n" for i in range(n_bytes // 8))
    return text[: n_bytes - 1].ljust(n_bytes - 1, "#") + "\n"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    """stdlib + site-packages (purelib == platlib, as in a virtual environment)."""
    std, site = tmp_path / "lib" / "python3", tmp_path / "venv" / "site-packages"
    for rel in STD_FILES:  # real code, so the tokenizer has something to learn
        _write(std / rel, (stdlib_root() / rel).read_text(encoding="utf-8"))
    _write(std / "test" / "test_os.py", "def test_os(): pass\n")  # the stdlib's test suite
    _write(std / "site-packages" / "inside.py", "x = 1\n")  # a base-interpreter site-packages
    _write(std / "__pycache__" / "abc.py", "cached = True\n")
    _write(site / "pkg" / "__init__.py", "from .core import run\n")
    _write(site / "pkg" / "core.py", "def run(x):\n    return x + 1\n" * 30)
    _write(site / "pkg" / "tests" / "helpers.py", "HELP = 1\n")  # a test folder
    _write(site / "pkg" / "test_core.py", "def test_run(): pass\n")  # test modules anywhere
    _write(site / "pkg" / "core_test.py", "def test_run2(): pass\n")
    _write(site / "pkg" / "conftest.py", "import pytest\n")
    _write(site / "pkg" / "notes.txt", "not python\n")
    _write(site / "vendored" / "copy_of_abc.py", (std / "abc.py").read_text())  # identical bytes
    _write(site / "other" / "copy_of_core.py", (site / "pkg" / "core.py").read_text())
    _write(site / "gen" / "tables.py", _lines(LIMIT + 1))  # "very large": over the limit by one byte
    _write(site / "gen" / "edge.py", _lines(LIMIT))  # exactly at the limit: kept
    (site / "gen" / "blob.py").write_bytes(b"\x00\x01binary")
    paths = {"stdlib": str(std), "purelib": str(site), "platlib": str(site)}
    monkeypatch.setattr(files_mod.sysconfig, "get_paths", lambda *a, **k: dict(paths))
    monkeypatch.setattr(files_mod, "PYTHON_MAX_FILE_BYTES", LIMIT)
    return std, site


def test_python_source_rules(fake_env, logs):
    got = load_corpus(DataConfig(source="python"), log=logs)
    names = [d.name for d in got.docs]
    assert got.kind == "python"
    expected = {f"stdlib/{rel}" for rel in STD_FILES} | {
        "purelib/pkg/__init__.py",
        "purelib/other/copy_of_core.py",
        "purelib/gen/edge.py",
    }
    # tests, caches, site-packages under stdlib, big and binary files: out; of identical files
    # the first in scan order (stdlib, then purelib, each sorted by path) stays
    assert set(names) == expected
    assert len(names) == len(set(names))  # platlib == purelib is walked once
    assert got.skipped == 1  # blob.py
    line = [ln for ln in logs.lines if ln.startswith("data: python environment")][0]
    assert "2 duplicates" in line and "1 files over 0.2 MB" in line and "1 not UTF-8" in line
    assert "fingerprint " in line


def test_python_duplicates_keep_the_first_copy_and_split_is_by_name(fake_env):
    got = load_corpus(DataConfig(source="python"), log=lambda *a: None)
    by_text = {}
    for d in got.docs:
        by_text.setdefault(d.text, []).append(d.name)
    assert all(len(v) == 1 for v in by_text.values())
    assert "stdlib/abc.py" in {d.name for d in got.docs}  # kept: stdlib is scanned first
    assert "abc.py" in STD_FILES
    train, val = split_documents(got.docs, 0.1)
    assert len(train) >= 1 and len(val) >= 1


def test_python_prepare_prints_and_stores_the_counts(fake_env, tmp_path, logs):
    c = prepare(DataConfig(source="python", vocab_size=300, cache_dir=str(tmp_path / "cache")), log=logs)
    s = c.stats
    n = len(STD_FILES) + 3
    assert (s["files"], s["duplicate_files"], s["large_files"], s["skipped_files"]) == (n, 2, 1, 1)
    assert len(s["fingerprint"]) == 64 and s["tokens_train"] == len(c.train)
    final = logs.lines[-1]
    assert f"{n} documents" in final and "MB" in final and "tokens" in final and s["fingerprint"][:16] in final
    # a change anywhere in the environment changes the fingerprint, hence the cache entry
    std, site = fake_env
    (site / "pkg" / "__init__.py").write_text("from .core import run  # edited\n")
    again = prepare(DataConfig(source="python", vocab_size=300, cache_dir=str(tmp_path / "cache")), log=logs)
    assert again.stats["fingerprint"] != s["fingerprint"] and again.stats["cache_hit"] is False
    assert not np.array_equal(np.asarray(again.train), np.asarray(c.train))


def test_python_source_rejects_glob_and_empty_environment(fake_env, tmp_path, monkeypatch):
    with pytest.raises(UserError, match="folder source"):
        prepare(DataConfig(source="python", glob="*.py", cache_dir=str(tmp_path / "c")), log=lambda *a: None)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(
        files_mod.sysconfig,
        "get_paths",
        lambda *a, **k: {"stdlib": str(empty), "purelib": str(empty), "platlib": str(empty)},
    )
    with pytest.raises(UserError, match="has no .py files") as info:
        prepare(DataConfig(source="python", cache_dir=str(tmp_path / "c")), log=lambda *a: None)
    assert "\n" not in str(info.value)


def test_a_file_changed_during_preparation_stops_the_build(fake_env, tmp_path, monkeypatch):
    import blocklab.data.build as build_mod

    std, site = fake_env
    real = build_mod.train_tokenizer

    def edit_then_train(texts, vocab_size):
        tok = real(texts, vocab_size)
        (site / "pkg" / "__init__.py").write_text("changed = True\n")
        return tok

    monkeypatch.setattr(build_mod, "train_tokenizer", edit_then_train)
    with pytest.raises(UserError, match="changed while the corpus was being prepared"):
        prepare(DataConfig(source="python", vocab_size=300, cache_dir=str(tmp_path / "cache")), log=lambda *a: None)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(("corpus-", ".tmp-"))]
