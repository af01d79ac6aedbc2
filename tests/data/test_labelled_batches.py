"""Batches of labelled examples: encoding, truncation, the epoch order, the shards, the cap."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from blocklab.data.examples import Example
from blocklab.data.labelled_batches import LabelledBatches, encode_examples
from blocklab.data.tokenizer import train_tokenizer
from blocklab.tokens import EOD_ID, PAD_ID


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(["def f(a, b):\n    return a - b\n" * 20, "hello world " * 50], 300)


def test_inputs_start_with_eod_and_pairs_are_separated(tok):
    enc = encode_examples(tok, [Example("a b", 1, "c", doc="x")], 64, regression=False)
    row = enc.ids[0].tolist()
    a, c = tok.encode("a b", add_special_tokens=False).ids, tok.encode("c", add_special_tokens=False).ids
    assert row == [EOD_ID] + a + [EOD_ID] + c and enc.labels.tolist() == [1] and enc.units == ["x"]


def test_longest_first_truncation_and_dropping(tok):
    long, short = "hello world " * 30, "hello"
    enc = encode_examples(tok, [Example(long, 0, short)], 16, regression=False)
    row = enc.ids[0].tolist()
    assert len(row) == 16 and enc.truncated == 1
    n_short = len(tok.encode(short, add_special_tokens=False).ids)
    assert row[-n_short - 1] == EOD_ID  # the short text is kept whole: the long one lost the tokens
    dropped = encode_examples(tok, [Example(long, 0), Example("hello", 1)], 16, regression=False, drop_long=True)
    assert dropped.dropped == 1 and dropped.labels.tolist() == [1]


def _data(tok, n=10):
    return encode_examples(tok, [Example("hello " * (i % 4 + 1), i % 2, doc=f"f{i // 2}") for i in range(n)], 32, False)


def test_an_epoch_visits_every_example_once_and_batches_are_pure(tok):
    b = LabelledBatches(_data(tok), batch_size=5, seed=3)
    seen = []
    for step in range(2):  # 10 examples, batch 5: one epoch
        ids, mask, y = b.get(step)
        assert ids.shape[0] == 5 and (ids[mask == 0] == PAD_ID).all()
        seen += [tuple(r[m.bool()].tolist()) for r, m in zip(ids, mask)]
    assert sorted(seen) == sorted(tuple(r.tolist()) for r in _data(tok).ids)
    torch.testing.assert_close(b.get(7)[0], LabelledBatches(_data(tok), 5, 3).get(7)[0])
    assert not torch.equal(b.get(2)[0], b.get(0)[0]) or not torch.equal(b.get(3)[0], b.get(1)[0])


def test_rank_shards_make_the_global_batch(tok):
    b = LabelledBatches(_data(tok), batch_size=4, seed=0)
    whole = b.get(5)
    shards = [b.get(5, rank, 2) for rank in range(2)]
    width = whole[0].shape[1]
    for part, full in zip(zip(*shards), whole):
        joined = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) if p.dim() == 2 else p for p in part])
        torch.testing.assert_close(joined, full)


def test_validation_batches_cover_the_split_in_order(tok):
    data = _data(tok, 7)
    labels = torch.cat([y for _, _, y in LabelledBatches(data, 3, 0).val_batches()])
    assert labels.tolist() == data.labels.tolist()


def test_cap_keeps_whole_units(tok):
    data = _data(tok, 10)  # five sources of two examples
    capped = data.cap(3, order=lambda d: d)
    assert capped.units == ["f0", "f0", "f1", "f1"]  # the second source is taken whole
    assert data.cap(None, order=str) is data
    assert np.array_equal(capped.labels, data.labels[:4])


def test_a_fixed_length_gives_one_shape(tok):
    b = LabelledBatches(_data(tok), batch_size=4, seed=0, pad_to=32)
    assert {b.get(s)[0].shape for s in range(5)} == {(4, 32)}
    assert {x[0].shape[1] for x in b.val_batches()} == {32}


def test_dropping_a_too_long_example_drops_its_group(tok):
    long = "hello world " * 30
    examples = [
        Example("hello", 0, group="f#0"),
        Example(long, 1, group="f#0"),
        Example("world", 0, group="g#0"),
        Example("hello world", 1, group="g#0"),
    ]
    enc = encode_examples(tok, examples, 16, regression=False, drop_long=True)
    assert enc.labels.tolist() == [0, 1] and enc.dropped == 2  # f's short version goes with its long one


def test_cap_takes_functions_not_files(tok):
    """One file with many functions must not fill a capped split by itself."""
    examples = [Example("hello", i % 2, doc="big.py" if i < 8 else "small.py", group=f"fn{i // 2}") for i in range(12)]
    enc = encode_examples(tok, examples, 32, False)
    capped = enc.cap(4, order=lambda unit: {"fn4": 0, "fn0": 1}.get(unit, 9))
    assert capped.units == ["fn0", "fn0", "fn4", "fn4"]
