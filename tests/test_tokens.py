"""blocklab.tokens: the special tokens' one home agrees with the tokenizer and the models that use it."""

from blocklab import tokens
from blocklab.data import IGNORE_INDEX, SPECIAL_TOKENS
from blocklab.data.tokenizer import special_ids, train_tokenizer
from blocklab.model import loss, seq2seq


def test_a_trained_tokenizer_gives_the_special_tokens_their_fixed_ids():
    tok = train_tokenizer(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)
    assert special_ids(tok) == (tokens.PAD_ID, tokens.MASK_ID, tokens.EOD_ID) == (0, 1, 2)
    assert [tok.token_to_id(t) for t in (tokens.PAD, tokens.MASK, tokens.EOD)] == [0, 1, 2]


def test_every_module_uses_the_same_values():
    assert SPECIAL_TOKENS is tokens.SPECIAL_TOKENS
    assert IGNORE_INDEX == loss.IGNORE_INDEX == tokens.IGNORE_INDEX == -100
    assert (seq2seq.PAD_ID, seq2seq.MASK_ID, seq2seq.EOS_ID) == (tokens.PAD_ID, tokens.MASK_ID, tokens.EOD_ID)
