"""The default corpus end to end: prepare() on the real standard library, vocab 8192.

Timings are printed (run with -s to see them) and bounded loosely so a pathological
slowdown fails; the measured numbers go in the issue note.
"""

import time

import numpy as np
import pytest

from blocklab.data import ClmBatches, DataConfig, MlmBatches, prepare
from blocklab.data.sources import load_corpus, split_documents

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("stdlib_cache"))  # never the user's real cache


def test_stdlib_default_corpus_end_to_end(cache_dir):
    cfg = DataConfig(cache_dir=cache_dir)  # source="stdlib", vocab_size=8192
    t0 = time.perf_counter()
    c = prepare(cfg, log=print)
    first = time.perf_counter() - t0
    s = c.stats
    print(
        f"\nstdlib: {s['files']} files ({s['files_train']} train / {s['files_val']} val), {s['bytes']:,} bytes, "
        f"{s['tokens_train']:,} train + {s['tokens_val']:,} val tokens; tokenizer {s['tokenizer_train_seconds']} s, "
        f"encode {s['encode_seconds']} s, first prepare {first:.1f} s"
    )
    assert s["cache_hit"] is False and c.vocab_size == 8192
    assert s["files"] > 300 and s["bytes"] > 5e6 and s["files_val"] >= 1
    assert 0.005 < s["files_val"] / s["files"] < 0.05
    # byte-level BPE on code: ~3-4 bytes per token; a broken merge table gives ~1
    assert 2.5 < s["bytes"] / (s["tokens_train"] + s["tokens_val"]) < 6
    assert first < 120

    # exact round trip of every file through the stored arrays (not just fresh encodes)
    loaded = load_corpus(cfg, log=lambda *a: None)
    train_docs, val_docs = split_documents(loaded.docs, cfg.val_fraction)
    for arr, starts, docs in ((c.train, c.train_doc_starts, train_docs), (c.val, c.val_doc_starts, val_docs)):
        ends = np.append(starts[1:], len(arr)) - 1  # drop each document's <eod>
        decoded = c.tokenizer.decode_batch([arr[a:b].tolist() for a, b in zip(starts, ends)], skip_special_tokens=False)
        bad = [d.name for d, text in zip(docs, decoded) if text != d.text]
        assert not bad, bad[:5]
    assert any(any(ord(ch) > 127 for ch in d.text) for d in train_docs)  # unicode was covered

    # both tasks can batch it at the default shapes
    x, y = ClmBatches(c.train, cfg.seq_len, 8, seed=0).get(0)
    assert x.shape == (8, cfg.seq_len) and int(x.max()) < 8192
    assert next(ClmBatches(c.val, cfg.seq_len, 8, seed=0).val_batches())[0].shape[1] == cfg.seq_len
    m = MlmBatches(
        c.train, c.train_doc_starts, 128, 8, 0, cfg.mask_prob, c.mask_id, c.pad_id, c.vocab_size, c.special_ids
    )
    assert m.get(0)[0].shape == (8, 128)

    # a second run starts in seconds
    t0 = time.perf_counter()
    again = prepare(cfg, log=print)
    second = time.perf_counter() - t0
    print(f"stdlib: second (cached) prepare {second:.2f} s")
    assert again.stats["cache_hit"] is True and second < 5
    assert np.array_equal(again.val, c.val)
