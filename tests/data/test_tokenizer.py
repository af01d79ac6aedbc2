"""Byte-level BPE: exact round trip on real files, specials, and the encoded arrays."""

import numpy as np
import pytest

from blocklab.data import DataConfig
from blocklab.data.sources import load_corpus, split_documents
from blocklab.data.tokenizer import token_dtype

from .conftest import SAMPLE_FILES, TRICKY_TEXT


def test_special_token_ids(small_corpus):
    c = small_corpus
    assert (c.pad_id, c.mask_id, c.eod_id) == (0, 1, 2)
    assert c.vocab_size <= 600 and c.vocab_size > 256 + 3  # bytes + specials + some merges


def test_round_trip_is_exact_on_real_stdlib_files(small_corpus, sample_dir):
    files = [sample_dir / rel for rel in SAMPLE_FILES if (sample_dir / rel).is_file()]
    texts = [f.read_bytes().decode("utf-8") for f in files]
    assert len(texts) >= 20
    assert sum(any(ord(ch) > 127 for ch in t) for t in texts) >= 5  # multi-byte UTF-8 covered
    n_ids = 0
    for f, text in zip(files, texts):
        ids = small_corpus.encode(text)
        assert small_corpus.decode(ids) == text, f
        n_ids += len(ids)
    # BPE must compress real code (a byte-per-token "tokenizer" would also round-trip)
    assert n_ids < sum(len(t.encode("utf-8")) for t in texts) / 2


def test_round_trip_on_tricky_text_and_specials_are_plain_text(small_corpus):
    ids = small_corpus.encode(TRICKY_TEXT)
    assert small_corpus.decode(ids) == TRICKY_TEXT
    # "<pad>" etc. written in a source file are ordinary text, never the special ids
    assert not set(ids) & {small_corpus.pad_id, small_corpus.mask_id, small_corpus.eod_id}
    # a text never seen in training, with bytes absent from it, still encodes exactly
    unseen = "\x01\x7f ☃ \U0010fffd Ω≈ç√"
    assert small_corpus.decode(small_corpus.encode(unseen)) == unseen


def test_token_arrays_hold_each_document_then_eod(small_corpus, sample_dir):
    c = small_corpus
    assert c.train.dtype == np.uint16 and isinstance(c.train, np.memmap)
    loaded = load_corpus(DataConfig(source=str(sample_dir)), log=lambda *a: None)
    train_docs, val_docs = split_documents(loaded.docs, 0.02)
    for arr, starts, docs in ((c.train, c.train_doc_starts, train_docs), (c.val, c.val_doc_starts, val_docs)):
        assert starts.dtype == np.int64 and len(starts) == len(docs) and starts[0] == 0
        ends = np.append(starts[1:], len(arr))
        assert np.all(arr[ends - 1] == c.eod_id)  # every document closed by <eod>
        assert int((np.asarray(arr) == c.eod_id).sum()) == len(docs)  # and only there
        for s, e, doc in zip(starts, ends, docs):
            assert c.decode(arr[s : e - 1]) == doc.text
    assert c.stats["tokens_train"] == len(c.train) and c.stats["tokens_val"] == len(c.val)


def test_token_dtype_widens_for_big_vocabularies():
    assert token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32


def test_vocab_too_small_for_specials_is_rejected():
    with pytest.raises(ValueError, match="vocab_size"):
        DataConfig(vocab_size=258)
