"""blocklab.tokens: the special tokens' one home agrees with the tokenizer and the models that use it."""

import pytest
import torch

from blocklab import build_model, tokens
from blocklab.data import IGNORE_INDEX, SPECIAL_TOKENS
from blocklab.data.batches import mask_tokens
from blocklab.data.tokenizer import special_ids, train_tokenizer
from blocklab.model import loss
from tests.helpers import small_cfg


def test_a_trained_tokenizer_gives_the_special_tokens_their_fixed_ids():
    tok = train_tokenizer(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)
    assert special_ids(tok) == (tokens.PAD_ID, tokens.MASK_ID, tokens.EOD_ID) == (0, 1, 2)
    assert [tok.token_to_id(t) for t in (tokens.PAD, tokens.MASK, tokens.EOD)] == [0, 1, 2]


def test_every_module_uses_the_same_values():
    """Each module's behaviour, not its names (which are the same objects once imported): the data
    labels, the loss, torch and the translation model all agree with blocklab.tokens."""
    assert SPECIAL_TOKENS == (tokens.PAD, tokens.MASK, tokens.EOD) == ("<pad>", "<mask>", "<eod>")
    assert IGNORE_INDEX == tokens.IGNORE_INDEX == torch.nn.CrossEntropyLoss().ignore_index == -100
    # the MLM masker labels every unselected position with the ignored value...
    ids = torch.arange(3, 40).view(1, -1)
    g = torch.Generator().manual_seed(0)
    _, labels = mask_tokens(ids, None, 0.5, tokens.MASK_ID, 50, (tokens.PAD_ID, tokens.MASK_ID, tokens.EOD_ID), g)
    assert set(labels[labels != ids].tolist()) == {tokens.IGNORE_INDEX}
    # ...which the loss skips, as torch's cross_entropy does
    h, w = torch.randn(ids.numel(), 8), torch.randn(50, 8)
    want = torch.nn.functional.cross_entropy(h @ w.t(), labels.view(-1))
    assert loss.chunked_cross_entropy(h, w, labels.view(-1)).item() == pytest.approx(want.item(), rel=1e-5)
    # the translation model rules out exactly <pad> and <mask>, and starts the decoder with <eod>
    model = build_model(small_cfg("pre-ln", "translation", vocab_size=50))
    memory, _ = model.encode(ids[:, :5], None)
    logits = model.next_token_logits(torch.tensor([[tokens.EOS_ID]]), 0, model.init_cache(memory), None)
    assert logits.isinf().nonzero()[:, 1].tolist() == [tokens.PAD_ID, tokens.MASK_ID]
    seen = []
    model.decode = lambda dec, *a, real=model.decode: (seen.append(dec), real(dec, *a))[1]
    model(ids[:, :5], labels=torch.tensor([[7, 8, tokens.IGNORE_INDEX]]))
    assert seen[0].tolist() == [[tokens.EOD_ID, 7, 8]]
    model(ids[:, :5], labels=torch.tensor([[7, tokens.IGNORE_INDEX, 9]]))
    assert seen[1].tolist() == [[tokens.EOD_ID, 7, tokens.PAD_ID]]  # an ignored label is fed back as <pad>
