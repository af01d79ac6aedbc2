"""prepare(): corpus -> trained tokenizer + encoded token arrays, through the cache.

First run: read the documents, split them, train byte-level BPE on the training split
only (validation text must not shape the vocabulary), encode both splits to memory-mapped
token files. Later runs: read and hash the documents (fast), open the cached entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from tokenizers import Tokenizer

from blocklab.data import cache
from blocklab.data.config import DataConfig, cache_root
from blocklab.data.sources import load_corpus, split_documents
from blocklab.data.tokenizer import (
    encode_to_file,
    load_tokenizer,
    special_ids,
    token_dtype,
    tokenizer_settings,
    train_tokenizer,
    unigram_entropy,
)


@dataclass
class Corpus:
    tokenizer: Tokenizer = field(repr=False)
    train: np.ndarray = field(repr=False)  # 1-D memmap: documents, each followed by eod_id
    val: np.ndarray = field(repr=False)
    train_doc_starts: np.ndarray = field(repr=False)  # int64 offset of each document's first token
    val_doc_starts: np.ndarray = field(repr=False)
    pad_id: int
    mask_id: int
    eod_id: int
    stats: dict

    @property
    def vocab_size(self) -> int:
        """Size of the trained vocabulary, specials included. At most DataConfig.vocab_size:
        a small corpus may run out of merges before reaching it."""
        return self.tokenizer.get_vocab_size()

    @property
    def unigram_entropy(self) -> float:
        """Entropy (nats) of the training split's token frequencies: the loss a model that
        learned only unigram statistics plateaus at (stalled-run detection)."""
        return float(self.stats["unigram_entropy"])

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.mask_id, self.eod_id)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        # Specials are shown by default: an <eod> in generated text is information.
        if hasattr(ids, "tolist"):  # numpy arrays and torch tensors
            ids = ids.tolist()
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


def _build(tmp: Path, train_docs, val_docs, cfg: DataConfig, log: Callable) -> dict:
    n_bytes = sum(len(d.text.encode("utf-8")) for d in train_docs)
    log(f"data: training byte-level BPE (vocab {cfg.vocab_size}) on {len(train_docs)} documents, "
        f"{n_bytes / 1e6:.1f} MB")
    t0 = time.perf_counter()
    tok = train_tokenizer([d.text for d in train_docs], cfg.vocab_size)
    t_train = time.perf_counter() - t0
    tok.save(str(tmp / "tokenizer.json"))

    t0 = time.perf_counter()
    dtype = token_dtype(cfg.vocab_size)
    counts = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    train_starts = encode_to_file(tok, train_docs, tmp / "train.bin", dtype, counts)
    val_starts = encode_to_file(tok, val_docs, tmp / "val.bin", dtype)
    np.save(tmp / "train_doc_starts.npy", train_starts)
    np.save(tmp / "val_doc_starts.npy", val_starts)
    t_encode = time.perf_counter() - t0
    itemsize = dtype.itemsize
    stats = {
        "tokens_train": (tmp / "train.bin").stat().st_size // itemsize,
        "tokens_val": (tmp / "val.bin").stat().st_size // itemsize,
        "vocab_size": tok.get_vocab_size(),
        "unigram_entropy": unigram_entropy(counts),
        "tokenizer_train_seconds": round(t_train, 3),
        "encode_seconds": round(t_encode, 3),
    }
    n_tokens = stats["tokens_train"] + stats["tokens_val"]
    log(f"data: tokenizer trained in {t_train:.1f} s, encoded {n_tokens:,} tokens in {t_encode:.1f} s")
    return {"dtype": dtype.name, "stats": stats}


def prepare(cfg: DataConfig, log: Callable = print) -> Corpus:
    """Tokenizer and token arrays for `cfg`'s corpus, from the cache when possible."""
    t_start = time.perf_counter()
    loaded = load_corpus(cfg, log)  # every bad input fails here, before the cache is touched
    train_docs, val_docs = split_documents(loaded.docs, cfg.val_fraction)
    settings = {**tokenizer_settings(cfg.vocab_size), "val_fraction": cfg.val_fraction}
    key = cache.corpus_key(loaded, settings)

    root = cache_root(cfg)
    cache.ensure_root(root)
    cache.clean_stale_tmp(root)
    entry = cache.entry_dir(root, key)

    def build(tmp: Path) -> dict:
        return _build(tmp, train_docs, val_docs, cfg, log)

    with cache.build_lock(root, key):
        meta = cache.read_meta(entry, key)
        hit = meta is not None
        if not hit:
            if entry.exists():
                log(f"data: cache entry {entry} is incomplete or corrupted; rebuilding it")
            meta = cache.write_entry(root, key, build)
        try:
            corpus = _open(entry, meta)
        except (OSError, ValueError) as e:  # damaged after meta.json was checked: rebuild once
            log(f"data: cache entry {entry} is unreadable ({e}); rebuilding it")
            meta = cache.write_entry(root, key, build, trust_existing=False)
            corpus, hit = _open(entry, meta), False

    corpus.stats.update(
        source=loaded.root,
        files=len(loaded.docs),
        files_train=len(train_docs),
        files_val=len(val_docs),
        bytes=sum(len(d.text.encode("utf-8")) for d in loaded.docs),
        skipped_files=loaded.skipped,
        empty_files=loaded.empty,
        cache_hit=hit,
        cache_dir=str(entry),
        prepare_seconds=round(time.perf_counter() - t_start, 3),
    )
    s = corpus.stats
    log(
        f"data: {s['files']} documents ({s['files_train']} train / {s['files_val']} val), {s['bytes'] / 1e6:.1f} MB, "
        f"{s['tokens_train']:,} + {s['tokens_val']:,} tokens, vocab {s['vocab_size']}"
        f" ({'cache hit' if hit else 'built'}, {s['prepare_seconds']:.1f} s)"
    )
    return corpus


def _open(entry: Path, meta: dict) -> Corpus:
    tok = load_tokenizer(entry / "tokenizer.json")
    pad_id, mask_id, eod_id = special_ids(tok)
    dtype = np.dtype(meta["dtype"])
    train = np.memmap(entry / "train.bin", dtype=dtype, mode="r")
    val = np.memmap(entry / "val.bin", dtype=dtype, mode="r")
    train_starts = np.load(entry / "train_doc_starts.npy")
    val_starts = np.load(entry / "val_doc_starts.npy")
    for starts, arr in ((train_starts, train), (val_starts, val)):
        if starts.ndim != 1 or len(starts) == 0 or starts[0] != 0 or starts[-1] >= len(arr):
            raise ValueError("document offsets do not match the token array")
    stats = dict(meta["stats"])
    if "unigram_entropy" not in stats:  # entries written before it was recorded
        stats["unigram_entropy"] = unigram_entropy(np.bincount(train, minlength=tok.get_vocab_size()))
    return Corpus(tok, train, val, train_starts, val_starts, pad_id, mask_id, eod_id, stats)
