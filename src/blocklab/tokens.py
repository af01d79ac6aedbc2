"""The special tokens, their ids and the ignored-label value: the one home of each.

blocklab's byte-level BPE (data/tokenizer.py) is trained with its special tokens first, in this
order, so their ids are fixed: <pad> 0, <mask> 1, <eod> 2. <eod> ends every document; in
translation it also ends every sentence and, as in fairseq, starts the decoder's input (EOS_ID
is the same id under the name the decoder uses). Nothing else may spell these ids as numbers.
"""

from __future__ import annotations

SPECIAL_TOKENS = ("<pad>", "<mask>", "<eod>")
PAD, MASK, EOD = SPECIAL_TOKENS
PAD_ID, MASK_ID, EOD_ID = range(len(SPECIAL_TOKENS))
EOS_ID = EOD_ID

IGNORE_INDEX = -100  # label value that torch's cross_entropy (and chunked_cross_entropy) skips

__all__ = ["SPECIAL_TOKENS", "PAD", "MASK", "EOD", "PAD_ID", "MASK_ID", "EOD_ID", "EOS_ID", "IGNORE_INDEX"]
