"""Byte-level BPE with the `tokenizers` library (training and encoding: build.py).

Byte-level means every byte has a symbol, so any text encodes without an unknown token
and decoding gives back the exact bytes (the GPT-2 / CodeParrot scheme).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from blocklab.tokens import EOD, MASK, PAD, SPECIAL_TOKENS  # noqa: F401  (PAD, MASK, EOD: for the callers)


def tokenizer_settings(vocab_size: int) -> dict:
    """Everything that changes the trained tokenizer: part of the cache key. The library
    version is in because a new release may train different merges."""
    return {
        "model": "bpe",
        "pre_tokenizer": "byte_level(add_prefix_space=False, use_regex=True)",
        "vocab_size": vocab_size,
        "special_tokens": list(SPECIAL_TOKENS),
        "tokenizers_version": tokenizers.__version__,
    }


def _configure(tok: Tokenizer) -> Tokenizer:
    # Text that happens to contain "<pad>" or "<eod>" (this very file does) must encode
    # as ordinary bytes, not as the special ids: the flag is not saved in tokenizer.json,
    # so it is set on every load. (Old `tokenizers` releases lack it; their round trip
    # is still exact, the literal just becomes one special id.)
    if hasattr(tok, "encode_special_tokens"):
        tok.encode_special_tokens = True
    return tok


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # No prefix space: a prefix would change the text, breaking the exact round trip.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """BPE trained on `texts`, consumed as a stream (the trainer keeps word counts only)."""
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),  # first, in this order: the ids of blocklab.tokens
        # All 256 byte symbols, even those the training text lacks, so validation or
        # prompt text with an unseen byte still encodes.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return _configure(tok)


def load_tokenizer(path: str | Path) -> Tokenizer:
    return _configure(Tokenizer.from_file(str(path)))


def special_ids(tok: Tokenizer) -> tuple[int, int, int]:
    ids = tuple(tok.token_to_id(t) for t in SPECIAL_TOKENS)
    if any(i is None for i in ids):
        raise ValueError(f"tokenizer lacks special tokens {SPECIAL_TOKENS}")
    return ids


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)


def unigram_entropy(counts: np.ndarray) -> float:
    """Entropy (nats) of the token frequencies: the loss of a model that learned only
    how often each token occurs, and nothing about context."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
