"""Building one cache entry from a DocStream, in memory that does not grow with the corpus.

1. Train byte-level BPE on the training split, or on a bounded sample of it
   (`data.tokenizer_sample_mb`): documents drawn by a hash of their name at the rate
   that fills the budget, so the sample is spread over the whole corpus and the same on
   every run. A stream of unknown size (a streamed hub dataset) gives its first
   `tokenizer_sample_mb` instead. Validation text never shapes the vocabulary.
2. Encode both splits in batches of documents through `encode_batch` (parallel in
   Rust), appending each batch's ids to the token file and its document offsets to
   the offsets file, and adding its ids to the training split's unigram counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from blocklab.data.config import DataConfig
from blocklab.data.documents import DocStream, Document, unit_hash
from blocklab.data.tokenizer import EOD, token_dtype, train_tokenizer, unigram_entropy
from blocklab.errors import UserError

SAMPLE_SALT = b"blocklab-tokenizer-sample-v1\x00"
# One encode_batch call: enough documents to keep every Rust thread busy, little enough
# text that its Encoding objects (ids, tokens, offsets: ~100 bytes a token) stay small.
ENCODE_BATCH_DOCS = 256
ENCODE_BATCH_BYTES = 4_000_000
OFFSETS_COPY_CHUNK = 1 << 20


def sample_budget(cfg: DataConfig, stream: DocStream) -> int | None:
    """Bytes of training text the tokenizer sees; None: all of it (the corpus fits)."""
    budget = int(cfg.tokenizer_sample_mb * 1e6)
    return None if stream.train_bytes is not None and stream.train_bytes <= budget else budget


def tokenizer_sample(stream: DocStream, budget: int | None, seen: dict) -> Iterator[str]:
    """Training texts for the tokenizer (see the module docstring); counts bytes in `seen`."""
    total = stream.train_bytes
    rate = 1.0 if budget is None or total is None else budget / total
    seen["bytes"] = 0
    for doc in stream.docs("train"):
        if rate < 1.0 and unit_hash(doc.name, SAMPLE_SALT) >= rate:
            continue
        yield doc.text
        seen["bytes"] += len(doc.text.encode("utf-8"))
        if budget is not None and seen["bytes"] >= budget:
            return
    if seen["bytes"] == 0 and rate < 1.0:  # a few huge documents, none drawn: take the first
        for doc in stream.docs("train"):
            yield doc.text
            seen["bytes"] += len(doc.text.encode("utf-8"))
            if seen["bytes"] >= budget:
                return


def _batches(docs: Iterable[Document], counter: dict) -> Iterator[list[str]]:
    batch, size = [], 0
    for doc in docs:
        n = len(doc.text.encode("utf-8"))
        batch.append(doc.text)
        size += n
        counter["docs"] += 1
        counter["bytes"] += n
        if size >= ENCODE_BATCH_BYTES or len(batch) >= ENCODE_BATCH_DOCS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_stream(
    tok: Tokenizer,
    docs: Iterable[Document],
    path: Path,
    dtype: np.dtype,
    counts: np.ndarray | None = None,
    progress: tqdm | None = None,
) -> dict:
    """Append the documents' ids, each followed by <eod>, as raw `dtype` to `path`, and
    the int64 offset of each document's first token to `path`.starts (raw); add the ids
    to `counts` if given. Returns the numbers of documents, bytes and tokens."""
    eod = np.asarray([tok.token_to_id(EOD)], dtype=dtype)
    # encode_batch_fast skips offset tracking, which we never use; fall back on old releases.
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    counter = {"docs": 0, "bytes": 0}
    pos = 0
    with open(path, "wb") as f, open(path.with_suffix(".starts"), "wb") as f_starts:
        for texts in _batches(docs, counter):
            before = counter["bytes"]
            pieces = []
            for enc in encode(texts, add_special_tokens=False):
                pieces += (np.asarray(enc.ids, dtype=dtype), eod)
            lengths = np.fromiter((len(p) for p in pieces[::2]), np.int64, len(texts)) + 1
            f_starts.write((pos + np.cumsum(lengths) - lengths).tobytes())
            ids = np.concatenate(pieces)
            f.write(ids.tobytes())
            pos += len(ids)
            if counts is not None:
                counts += np.bincount(ids, minlength=len(counts))
            if progress is not None:
                progress.update(counter["bytes"] - before)
    return {"docs": counter["docs"], "bytes": counter["bytes"], "tokens": pos}


def _offsets_to_npy(raw: Path, npy: Path) -> None:
    """The raw int64 offsets as a .npy file, copied in chunks (they can be large)."""
    n = raw.stat().st_size // 8
    out = np.lib.format.open_memmap(npy, mode="w+", dtype=np.int64, shape=(n,))
    src = np.memmap(raw, dtype=np.int64, mode="r", shape=(n,))
    for i in range(0, n, OFFSETS_COPY_CHUNK):
        out[i : i + OFFSETS_COPY_CHUNK] = src[i : i + OFFSETS_COPY_CHUNK]
    out.flush()
    del out, src
    raw.unlink()


def build_entry(tmp: Path, stream: DocStream, cfg: DataConfig, log: Callable) -> dict:
    """Write tokenizer.json, {train,val}.bin and their offsets into `tmp`; return the metadata."""
    budget = sample_budget(cfg, stream)
    what = "all of the training split" if budget is None else f"a sample of at most {budget / 1e6:g} MB"
    log(f"data: training byte-level BPE (vocab {cfg.vocab_size}) on {what}")
    t0 = time.perf_counter()
    seen: dict = {}
    tok = train_tokenizer(tokenizer_sample(stream, budget, seen), cfg.vocab_size)
    t_train = time.perf_counter() - t0
    if seen["bytes"] == 0:
        raise UserError(f"{stream.root} has no training text (every document is empty)")
    tok.save(str(tmp / "tokenizer.json"))
    log(f"data: tokenizer trained on {seen['bytes'] / 1e6:.1f} MB in {t_train:.1f} s; encoding")

    t0 = time.perf_counter()
    dtype = token_dtype(tok.get_vocab_size())
    counts = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    total = stream.info.get("bytes")
    with tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1000,
        desc="data: encoding",
        disable=None,
        mininterval=1.0,
        leave=False,
    ) as bar:
        parts = {
            part: encode_stream(
                tok, stream.docs(part), tmp / f"{part}.bin", dtype, counts if part == "train" else None, bar
            )
            for part in ("train", "val")
        }
    t_encode = time.perf_counter() - t0
    for part, got in parts.items():
        if got["docs"] == 0:
            raise UserError(
                f"{stream.root}: no document fell into the {part} split "
                f"(too few documents for data.val_fraction={cfg.val_fraction})"
            )
        _offsets_to_npy(tmp / f"{part}.starts", tmp / f"{part}_doc_starts.npy")
    n_bytes = parts["train"]["bytes"] + parts["val"]["bytes"]
    stats = {
        **stream.info,
        "files": parts["train"]["docs"] + parts["val"]["docs"],
        "files_train": parts["train"]["docs"],
        "files_val": parts["val"]["docs"],
        "bytes": n_bytes,
        "tokens_train": parts["train"]["tokens"],
        "tokens_val": parts["val"]["tokens"],
        "vocab_size": tok.get_vocab_size(),
        "unigram_entropy": unigram_entropy(counts),
        "tokenizer_sample_bytes": seen["bytes"],
        "tokenizer_train_seconds": round(t_train, 3),
        "encode_seconds": round(t_encode, 3),
        "encode_mb_per_s": round(n_bytes / 1e6 / max(t_encode, 1e-9), 2),
    }
    log(
        f"data: encoded {n_bytes / 1e6:.1f} MB into {stats['tokens_train'] + stats['tokens_val']:,} tokens "
        f"in {t_encode:.1f} s ({stats['encode_mb_per_s']:.1f} MB/s)"
    )
    return {"dtype": dtype.name, "stats": stats}
