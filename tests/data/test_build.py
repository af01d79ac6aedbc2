"""The streamed build: batch boundaries do not change the tokens, the tokenizer sample is
bounded and spread over the corpus, wide vocabularies get uint32 token files."""

import numpy as np
import pytest

import blocklab.data.build as build_mod
from blocklab.data import DataConfig, prepare
from blocklab.data.build import tokenizer_sample
from blocklab.data.sources import load_corpus, open_stream, split_documents

QUIET = dict(log=lambda *a: None)


def _arrays(c):
    return [np.asarray(a) for a in (c.train, c.val, c.train_doc_starts, c.val_doc_starts)]


@pytest.fixture(scope="module")
def one_pass(sample_dir, tmp_path_factory):
    """(the sample folder prepared at vocabulary 400 and every document encoded in one write, its cache folder):
    the reference of the tests below, built once (each build trains a tokenizer)."""
    root = tmp_path_factory.mktemp("one_pass")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build_mod, "ENCODE_BATCH_DOCS", 10**9)
        mp.setattr(build_mod, "ENCODE_BATCH_BYTES", 10**12)
        return prepare(DataConfig(source=str(sample_dir), vocab_size=400, cache_dir=str(root)), **QUIET), root


def test_many_small_writes_give_the_same_tokens_as_one_pass(one_pass, sample_dir, tmp_path, monkeypatch):
    one, _ = one_pass

    calls = []
    real = build_mod.encode_stream

    def counting(tok, docs, *a, **k):
        def each(docs):
            for d in docs:
                calls.append(d.name)
                yield d

        return real(tok, each(docs), *a, **k)

    monkeypatch.setattr(build_mod, "encode_stream", counting)
    monkeypatch.setattr(build_mod, "ENCODE_BATCH_DOCS", 3)  # a write every 3 documents...
    monkeypatch.setattr(build_mod, "ENCODE_BATCH_BYTES", 5000)  # ...or every 5 kB of text
    chunked = prepare(DataConfig(source=str(sample_dir), vocab_size=400, cache_dir=str(tmp_path / "b")), **QUIET)
    assert len(calls) == one.stats["files"] > 20  # so there were many batches
    for a, b in zip(_arrays(one), _arrays(chunked)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert one.unigram_entropy == chunked.unigram_entropy


def test_tokenizer_sample_is_bounded_spread_and_in_the_key(one_pass, sample_dir, logs):
    # the one-pass corpus's cache folder: the whole-corpus build is found there, the sampled one is added beside it
    cfg_all = DataConfig(source=str(sample_dir), vocab_size=400, cache_dir=str(one_pass[1]))
    stream = open_stream(cfg_all, **QUIET)
    total = stream.train_bytes
    assert total > 200_000
    budget = 60_000
    seen = {}
    sample = list(tokenizer_sample(stream, budget, seen))
    train_docs, _ = split_documents(load_corpus(cfg_all, **QUIET).docs, cfg_all.val_fraction)
    order = {d.text: i for i, d in enumerate(train_docs)}
    picked = sorted(order[t] for t in sample)
    biggest = max(len(d.text.encode()) for d in train_docs)
    assert 0 < seen["bytes"] <= budget + biggest and seen["bytes"] == sum(len(t.encode()) for t in sample)
    assert picked != list(range(len(picked)))  # not simply the first documents

    small = DataConfig(
        source=str(sample_dir), vocab_size=400, cache_dir=str(one_pass[1]), tokenizer_sample_mb=budget / 1e6
    )
    c_small, c_all = prepare(small, log=logs), prepare(cfg_all, **QUIET)
    assert any("a sample of at most 0.06 MB" in line for line in logs.lines)
    assert c_small.stats["tokenizer_sample_bytes"] == seen["bytes"]
    assert c_all.stats["tokenizer_sample_bytes"] == total  # the corpus fits: all of it
    assert c_small.stats["cache_dir"] != c_all.stats["cache_dir"]
    # the sample only shapes the merges: every document still round-trips exactly
    ends = np.append(c_small.train_doc_starts[1:], len(c_small.train)) - 1
    got = [c_small.decode(c_small.train[a:b]) for a, b in zip(c_small.train_doc_starts, ends)]
    assert got == [d.text for d in train_docs]


def test_wide_vocabularies_are_stored_as_uint32(one_pass, sample_dir, tmp_path, monkeypatch):
    narrow, _ = one_pass
    assert narrow.train.dtype == np.uint16
    # A real vocabulary over 65,535 needs a large corpus; the choice is made by token_dtype
    # (tested in test_tokenizer.py), so here we force it and check the whole path.
    monkeypatch.setattr(build_mod, "token_dtype", lambda v: np.dtype(np.uint32))
    wide = prepare(DataConfig(source=str(sample_dir), vocab_size=400, cache_dir=str(tmp_path / "w")), **QUIET)
    assert wide.train.dtype == np.uint32 and isinstance(wide.train, np.memmap)
    assert np.array_equal(np.asarray(wide.train, dtype=np.int64), np.asarray(narrow.train, dtype=np.int64))


@pytest.mark.parametrize("n", [1, 2])
def test_tiny_folders_still_split(tmp_path, n):
    for i in range(n):
        (tmp_path / "c" / f"f{i}.py").parent.mkdir(exist_ok=True)
        (tmp_path / "c" / f"f{i}.py").write_text("".join(f"x{i}_{j} = {j}\n" for j in range(40)))
    c = prepare(DataConfig(source=str(tmp_path / "c"), vocab_size=300, cache_dir=str(tmp_path / "k")), **QUIET)
    assert c.stats["files_train"] >= 1 and c.stats["files_val"] >= 1 and len(c.val) > 1


def test_sample_of_a_few_huge_documents_is_never_empty(tmp_path):
    from blocklab.data.documents import DocStream, Document

    docs = [Document(f"big{i}", "x = 1\n" * 2000) for i in range(3)]
    stream = DocStream("test", "three big documents", "0" * 64, lambda part: iter(docs), train_bytes=36_000)
    seen = {}
    sample = list(tokenizer_sample(stream, 10, seen))  # rate 10 / 36,000: almost surely none drawn
    assert sample == [docs[0].text] and seen["bytes"] == 12_000
