"""Data pipeline: corpora, byte-level BPE tokenizer, cache, clm / mlm batches (SPEC section 7)."""

from blocklab.data.batches import IGNORE_INDEX, ClmBatches, MlmBatches, mask_tokens
from blocklab.data.config import SPECIAL_TOKENS, ConfigError, DataConfig
from blocklab.data.corpus import Corpus, prepare

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
