"""Data pipeline: corpora, byte-level BPE tokenizer, cache, clm / mlm batches (docs/models.md#data)."""

from __future__ import annotations

from blocklab.lazy import lazy_exports

__all__ = [
    "DataConfig",
    "ConfigError",
    "Corpus",
    "prepare",
    "ClmBatches",
    "MlmBatches",
    "mask_tokens",
    "IGNORE_INDEX",
    "SPECIAL_TOKENS",
]

# Imported on first use: the batches and the corpus bring torch, numpy and tokenizers, which reading a
# DataConfig (the command line's --help, a config file) does not need.
_LAZY = {
    "DataConfig": "blocklab.data.config",
    "ConfigError": "blocklab.data.config",
    "SPECIAL_TOKENS": "blocklab.data.config",
    "Corpus": "blocklab.data.corpus",
    "prepare": "blocklab.data.corpus",
    "ClmBatches": "blocklab.data.batches",
    "MlmBatches": "blocklab.data.batches",
    "mask_tokens": "blocklab.data.batches",
    "IGNORE_INDEX": "blocklab.data.batches",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
