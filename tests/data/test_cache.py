"""The prepared-corpus cache: hits, rebuilds on change, atomicity, concurrent builders."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import blocklab.data.build as build_mod
from blocklab.data import DataConfig, prepare
from blocklab.data.cache import TMP_PREFIX

QUIET = dict(log=lambda *a: None)


def _corpus_dir(root: Path, n=12) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {i} + 'ünïcode'\n" * (20 + i))
    return root


def _entries(cache: Path):
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("corpus-"))


def _forbid_training(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("tokenizer retrained on a cache hit")

    monkeypatch.setattr(build_mod, "train_tokenizer", boom)


def test_second_prepare_is_a_fast_cache_hit(tmp_path, monkeypatch):
    cfg = DataConfig(source=str(_corpus_dir(tmp_path / "c")), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    first = prepare(cfg, **QUIET)
    assert first.stats["cache_hit"] is False and first.stats["tokenizer_train_seconds"] >= 0
    _forbid_training(monkeypatch)
    t0 = time.perf_counter()
    second = prepare(cfg, **QUIET)
    assert time.perf_counter() - t0 < 2.0
    assert second.stats["cache_hit"] is True
    assert np.array_equal(first.train, second.train) and np.array_equal(first.val_doc_starts, second.val_doc_starts)
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert _entries(tmp_path / "cache") == [Path(first.stats["cache_dir"]).name]


def test_env_var_chooses_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKLAB_CACHE", str(tmp_path / "envcache"))
    c = prepare(DataConfig(source=str(_corpus_dir(tmp_path / "c")), vocab_size=300), **QUIET)
    assert Path(c.stats["cache_dir"]).parent == tmp_path / "envcache"


def test_changed_corpus_or_settings_rebuild(tmp_path):
    src = _corpus_dir(tmp_path / "c")
    cache = tmp_path / "cache"
    cfg = DataConfig(source=str(src), vocab_size=300, cache_dir=str(cache))
    base = prepare(cfg, **QUIET)
    (src / "mod3.py").write_text((src / "mod3.py").read_text() + "# one more line\n")  # one byte-level edit
    edited = prepare(cfg, **QUIET)
    assert edited.stats["cache_hit"] is False and edited.stats["cache_dir"] != base.stats["cache_dir"]
    (src / "mod3.py").rename(src / "mod3.pz")  # same bytes, order and length, another name
    renamed = prepare(cfg, **QUIET)
    assert renamed.stats["cache_hit"] is False
    bigger = prepare(DataConfig(source=str(src), vocab_size=320, cache_dir=str(cache)), **QUIET)
    assert bigger.stats["cache_hit"] is False
    assert len(_entries(cache)) == 4
    # seq_len and mask_prob only shape batches: same entry
    cfg2 = DataConfig(source=str(src), vocab_size=320, seq_len=64, mask_prob=0.3, cache_dir=str(cache))
    again = prepare(cfg2, **QUIET)
    assert again.stats["cache_hit"] is True


def test_interrupted_build_leaves_nothing(tmp_path, monkeypatch):
    cfg = DataConfig(source=str(_corpus_dir(tmp_path / "c")), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    real_encode = build_mod.encode_stream

    def killed(tok, docs, path, *rest):
        docs = list(docs)
        real_encode(tok, docs[: len(docs) // 2], path, *rest)  # half the file written...
        raise KeyboardInterrupt  # ...then Ctrl-C

    monkeypatch.setattr(build_mod, "encode_stream", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, **QUIET)
    left = [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".lock-")]
    assert left == []
    monkeypatch.setattr(build_mod, "encode_stream", real_encode)
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_debris_of_a_killed_run_is_not_trusted_and_is_cleaned(tmp_path):
    cfg = DataConfig(source=str(_corpus_dir(tmp_path / "c")), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    good = prepare(cfg, **QUIET)
    entry = Path(good.stats["cache_dir"])
    cache = entry.parent
    tokens = np.array(good.train)

    # 1. a temp folder of a build killed with SIGKILL (its process is gone)
    from blocklab.data.cache import _host_tag

    debris = cache / f"{TMP_PREFIX}{'ab' * 8}-{_host_tag()}-{_dead_pid()}-deadbeef"
    debris.mkdir()
    (debris / "train.bin").write_bytes(b"\x01\x02")
    # 2. a temp folder of a builder that is still running (this process): must survive
    alive = cache / f"{TMP_PREFIX}{'cd' * 8}-{_host_tag()}-{os.getpid()}-cafe"
    alive.mkdir()
    assert prepare(cfg, **QUIET).stats["cache_hit"] is True
    assert not debris.exists() and alive.exists()

    # 3. an entry whose token file lost its last token (killed mid-copy, disk full): size check
    with open(entry / "train.bin", "r+b") as f:
        f.truncate(len(tokens) * tokens.itemsize - tokens.itemsize)
    rebuilt = prepare(cfg, **QUIET)
    assert rebuilt.stats["cache_hit"] is False and np.array_equal(rebuilt.train, tokens)

    # 4. an entry without meta.json (meta is written last: the build never finished)
    (entry / "meta.json").unlink()
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False

    # 5. garbage meta.json, or a meta.json from another format version
    (entry / "meta.json").write_text("{not json")
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False
    meta = json.loads((entry / "meta.json").read_text())
    (entry / "meta.json").write_text(json.dumps({**meta, "format": -1}))
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False

    # 6. a damaged doc-offsets file of the right size
    starts = entry / "train_doc_starts.npy"
    starts.write_bytes(b"\x00" * starts.stat().st_size)
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False
    final = prepare(cfg, **QUIET)
    assert final.stats["cache_hit"] is True and np.array_equal(final.train, tokens)


def _worker(src, cache, queue):
    c = prepare(DataConfig(source=src, vocab_size=300, cache_dir=cache), log=lambda *a: None)
    queue.put((c.stats["cache_hit"], len(c.train)))


def test_concurrent_builders_build_once(tmp_path):
    """Like every rank of a torchrun job calling prepare() at once. Forked, not spawned:
    a fresh interpreter would spend seconds importing torch."""
    import multiprocessing as mp

    src, cache = _corpus_dir(tmp_path / "c", n=30), tmp_path / "cache"
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(src), str(cache), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    assert sorted(hit for hit, _ in results) == [False, True]  # one built, the other waited and reused
    assert results[0][1] == results[1][1] and len(_entries(cache)) == 1


def test_entry_published_meanwhile_by_another_builder_wins(tmp_path):
    """Another host on a shared file system (where flock may not reach) finishes first."""
    from blocklab.data.cache import entry_dir, read_meta, write_entry

    key = "f" * 64

    def fill(label):
        def f(tmp):
            (tmp / "train.bin").write_bytes(label.encode())
            if label == "ours":  # while we build, the other builder publishes
                write_entry(tmp_path, key, fill("theirs"))
            return {"stats": {"by": label}}

        return f

    meta = write_entry(tmp_path, key, fill("ours"))
    assert meta["stats"]["by"] == "theirs" == read_meta(entry_dir(tmp_path, key), key)["stats"]["by"]
    assert [p.name for p in tmp_path.iterdir()] == [entry_dir(tmp_path, key).name]  # no temp left
    # a damaged entry is replaced when we say so
    meta = write_entry(tmp_path, key, fill("again"), trust_existing=False)
    assert read_meta(entry_dir(tmp_path, key), key)["stats"]["by"] == "again"


def test_unigram_entropy_is_that_of_the_train_tokens_and_old_entries_get_it(tmp_path):
    cfg = DataConfig(source=str(_corpus_dir(tmp_path / "c")), vocab_size=300, cache_dir=str(tmp_path / "cache"))
    c = prepare(cfg, **QUIET)
    p = np.bincount(np.asarray(c.train), minlength=c.vocab_size) / len(c.train)
    p = p[p > 0]
    expected = float(-(p * np.log(p)).sum())
    assert isinstance(c.unigram_entropy, float) and c.unigram_entropy == pytest.approx(expected, rel=1e-12)
    assert 0 < c.unigram_entropy < np.log(c.vocab_size)
    # An entry written before the entropy was recorded: still a cache hit, computed on open.
    meta_path = Path(c.stats["cache_dir"]) / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["stats"]["unigram_entropy"]
    meta_path.write_text(json.dumps(meta))
    old = prepare(cfg, **QUIET)
    assert old.stats["cache_hit"] is True and old.unigram_entropy == pytest.approx(expected, rel=1e-12)
