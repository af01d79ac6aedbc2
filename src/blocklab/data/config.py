"""Data configuration: which corpus, how to tokenize it, where to cache it.

Every field is checked at construction so a typo fails at once with a message that
names the field, rather than minutes later inside tokenizer training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from blocklab.errors import ConfigError, UserError  # noqa: F401  (ConfigError is re-exported)
from blocklab.settings import setting, validate
from blocklab.tokens import SPECIAL_TOKENS  # noqa: F401  (re-exported by blocklab.data)

# Byte-level BPE starts from the 256 byte symbols; the three special tokens come on top.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)
MAX_VOCAB_SIZE = 2**32 - 1  # token arrays are at most uint32


@dataclass
class DataConfig:
    source: str = setting(
        "stdlib",
        help="the corpus: stdlib (this Python's standard library), python (every installed .py file), "
        "hf:NAME_OR_PATH, gettext (translation), or a text file, folder, .jsonl or .tsv file",
        expected="'stdlib', 'python', 'hf:NAME_OR_PATH' or a path to a text file, a folder or a .jsonl file",
    )
    glob: str | None = setting(
        None, help="folder sources only: which files to read, e.g. src/**/*.py", derived="every non-hidden file"
    )
    vocab_size: int = setting(
        8192,
        help="byte-level BPE vocabulary, the 256 bytes and 3 special tokens included",
        min=MIN_VOCAB_SIZE,
        max=MAX_VOCAB_SIZE,
    )
    seq_len: int = setting(256, help="tokens per training window", unit="tokens", min=1)
    mask_prob: float = setting(0.15, help="task=mlm: the share of positions masked", min=0, max=1, min_exclusive=True)
    val_fraction: float = setting(
        0.02,
        help="the share of documents held out for validation (deterministic, by document)",
        min=0,
        max=1,
        min_exclusive=True,
        max_exclusive=True,
    )
    cache_dir: str | None = setting(
        None,
        help="where tokenizers and token arrays are cached",
        derived="$BLOCKLAB_CACHE, else $XDG_CACHE_HOME/blocklab, else ~/.cache/blocklab",
    )
    text_field: str = setting("text", help="hf: and .jsonl sources: the column or JSON key holding each document")
    hf_config: str | None = setting(
        None,
        help="hf: sources: the dataset's configuration name, e.g. wikitext-103-raw-v1",
        derived="the dataset's default configuration",
    )
    split: str = setting("train", help="hf: sources: the split to read (validation is cut from it)")
    streaming: bool = setting(False, help="hf: hub names only: iterate without downloading the whole set first")
    src_lang: str = setting("de", help="translation: the source language code")
    tgt_lang: str = setting("en", help="translation: the target language code")
    # BPE merges stop changing long before a GB-scale corpus is exhausted, while training time and memory
    # grow with the text: a deterministic sample spread over the corpus is enough.
    tokenizer_sample_mb: float = setting(
        256.0,
        help="the BPE tokenizer is trained on at most this much training text",
        unit="MB",
        min=0,
        min_exclusive=True,
    )
    task_pool_mb: float = setting(
        8.0,
        help="blocklab finetune's code tasks: the environment's Python files they are built from",
        unit="MB",
        min=0,
        min_exclusive=True,
    )
    max_examples: int | None = setting(
        None,
        help="classification: cap on the training examples (validation gets a quarter of it)",
        derived="every example",
        min=1,
    )

    def __post_init__(self):
        # A pathlib.Path is as good as its string; the config stores strings so that it writes as TOML.
        if isinstance(self.source, os.PathLike):
            self.source = os.fspath(self.source)
        if isinstance(self.cache_dir, os.PathLike):
            self.cache_dir = os.fspath(self.cache_dir)
        validate(self)


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
