"""Data configuration: which corpus, how to tokenize it, where to cache it.

Every field is checked at construction so a typo fails at once with a message that
names the field, rather than minutes later inside tokenizer training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from blocklab.errors import ConfigError, UserError  # noqa: F401  (ConfigError is re-exported)
from blocklab.tokens import SPECIAL_TOKENS  # noqa: F401  (re-exported by blocklab.data)

# Byte-level BPE starts from the 256 byte symbols; the three special tokens come on top.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
MAX_VOCAB_SIZE = 2**32 - 1  # token arrays are at most uint32


def _int_field(name: str, value, lo: int, hi: int | None = None) -> None:
    # bool is an int subclass; `vocab_size = true` in a TOML file is still a mistake.
    ok = isinstance(value, int) and not isinstance(value, bool)
    ok = ok and value >= lo and (hi is None or value <= hi)
    if not ok:
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ConfigError(f"{name}={value!r} is invalid: expected an integer {rng}")


def _float_field(name: str, value, lo: float, hi: float, lo_open: bool, hi_open: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise ConfigError(f"{name}={value!r} is invalid: expected a number in {rng}")


@dataclass
class DataConfig:
    source: str = "stdlib"  # "stdlib" | "python" | "hf:NAME_OR_PATH" | text file | folder | .jsonl file
    glob: str | None = None  # folder only, e.g. "src/**/*.py"; None: every (non-hidden) file
    vocab_size: int = 8192
    seq_len: int = 256
    mask_prob: float = 0.15
    val_fraction: float = 0.02  # by document, deterministic
    cache_dir: str | None = None  # None: $BLOCKLAB_CACHE, $XDG_CACHE_HOME/blocklab, ~/.cache/blocklab
    # hf: sources (SPEC section 5 spellings)
    text_field: str = "text"  # the column (hf:) / JSON key holding each document's text
    hf_config: str | None = None  # a hub dataset's configuration name, e.g. "wikitext-103-raw-v1"
    split: str = "train"  # the hub/local dataset split to read; we cut validation from it ourselves
    streaming: bool = False  # hf: hub names only: iterate without downloading the whole set first
    # parallel text (translation): source and target language codes
    src_lang: str = "de"
    tgt_lang: str = "en"
    # Byte-level BPE is trained on at most this many MB of training text, a deterministic
    # sample spread over the corpus: merges stop changing long before a GB-scale corpus
    # is exhausted, while training time and memory grow with the text.
    tokenizer_sample_mb: float = 256.0
    # task="classification" (data/downstream.py): the embedded code tasks are built from this many MB
    # of the environment's Python files, and max_examples caps the training split (validation gets a
    # quarter of it); None: every example.
    task_pool_mb: float = 8.0
    max_examples: int | None = None

    def __post_init__(self):
        if isinstance(self.source, os.PathLike):
            self.source = os.fspath(self.source)
        if not isinstance(self.source, str) or not self.source.strip():
            raise ConfigError(
                f"source={self.source!r} is invalid: expected 'stdlib', 'python', 'hf:NAME_OR_PATH' "
                "or a path to a text file, a folder or a .jsonl file"
            )
        if self.glob is not None and (not isinstance(self.glob, str) or not self.glob.strip()):
            raise ConfigError(f"glob={self.glob!r} is invalid: expected a pattern such as 'src/**/*.py' or None")
        _int_field("vocab_size", self.vocab_size, MIN_VOCAB_SIZE, MAX_VOCAB_SIZE)
        _int_field("seq_len", self.seq_len, 1)
        _float_field("mask_prob", self.mask_prob, 0.0, 1.0, lo_open=True, hi_open=False)
        _float_field("val_fraction", self.val_fraction, 0.0, 1.0, lo_open=True, hi_open=True)
        for name in ("text_field", "split", "src_lang", "tgt_lang"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{name}={value!r} is invalid: expected a non-empty string")
        if self.hf_config is not None and (not isinstance(self.hf_config, str) or not self.hf_config.strip()):
            raise ConfigError(f"hf_config={self.hf_config!r} is invalid: expected a configuration name or None")
        if not isinstance(self.streaming, bool):
            raise ConfigError(f"streaming={self.streaming!r} is invalid: expected true or false")
        _float_field("tokenizer_sample_mb", self.tokenizer_sample_mb, 0.0, float("inf"), lo_open=True, hi_open=True)
        _float_field("task_pool_mb", self.task_pool_mb, 0.0, float("inf"), lo_open=True, hi_open=True)
        if self.max_examples is not None:
            _int_field("max_examples", self.max_examples, 1)
        if isinstance(self.cache_dir, os.PathLike):
            self.cache_dir = os.fspath(self.cache_dir)
        if self.cache_dir is not None and (not isinstance(self.cache_dir, str) or not self.cache_dir):
            raise ConfigError(f"cache_dir={self.cache_dir!r} is invalid: expected a folder path or None")


def cache_root(cfg: DataConfig) -> Path:
    """The folder holding cache entries: the config field, then $BLOCKLAB_CACHE, then the
    XDG user cache folder."""
    if cfg.cache_dir:
        return Path(cfg.cache_dir).expanduser()
    if os.environ.get("BLOCKLAB_CACHE"):
        return Path(os.environ["BLOCKLAB_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "blocklab"
    return Path.home() / ".cache" / "blocklab"
