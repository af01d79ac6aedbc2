"""clm / mlm batches: alignment, determinism, rank shards, BERT masking statistics."""

import math

import numpy as np
import pytest
import torch

from blocklab.data import IGNORE_INDEX, ClmBatches, MlmBatches, mask_tokens
from blocklab.errors import UserError

PAD, MASK, EOD = 0, 1, 2
SPECIALS = (PAD, MASK, EOD)


# --- causal LM -------------------------------------------------------------------------


def _stream(n=5000):
    return np.arange(3, n + 3, dtype=np.uint16)  # distinct values: a token's value is its position + 3


def test_clm_windows_are_contiguous_and_labels_aligned():
    x, y = ClmBatches(_stream(), seq_len=32, batch_size=8, seed=0).get(0)
    assert x.shape == y.shape == (8, 32) and x.dtype == y.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])  # label t is the token after input t
    assert torch.all(y[:, -1] == x[:, -1] + 1)
    assert torch.all(x[:, 1:] - x[:, :-1] == 1)  # one slice of the stream, not scattered tokens


def test_clm_is_a_function_of_seed_and_step_only():
    tokens = _stream()
    a, b = ClmBatches(tokens, 16, 4, seed=1), ClmBatches(tokens, 16, 4, seed=1)
    later = [a.get(s)[0] for s in (5, 3, 0)]  # any call order: there is no hidden state
    assert all(torch.equal(t, b.get(s)[0]) for t, s in zip(later, (5, 3, 0)))
    assert not torch.equal(a.get(0)[0], a.get(1)[0])
    assert not torch.equal(a.get(0)[0], ClmBatches(tokens, 16, 4, seed=2).get(0)[0])


def test_clm_offsets_cover_the_whole_stream_uniformly():
    tokens = _stream(200)
    b = ClmBatches(tokens, seq_len=10, batch_size=64, seed=0)
    starts = torch.cat([b.get(s)[0][:, 0] for s in range(200)]).numpy() - 3
    counts = np.bincount(starts, minlength=b.n_offsets)
    assert starts.min() == 0 and starts.max() == len(tokens) - 11  # first and last window reachable
    assert len(counts) == b.n_offsets and counts.min() > 0
    expected = len(starts) / b.n_offsets
    assert abs(counts.std() - math.sqrt(expected)) < 0.3 * math.sqrt(expected)  # ~multinomial spread


@pytest.mark.parametrize("world", [2, 4, 8])
def test_clm_rank_shards_concatenate_to_the_single_process_batch(world):
    b = ClmBatches(_stream(), 16, 8, seed=3)
    for step in (0, 7):
        x, y = b.get(step)
        shards = [b.get(step, rank=r, world_size=world) for r in range(world)]
        assert torch.equal(torch.cat([s[0] for s in shards]), x)
        assert torch.equal(torch.cat([s[1] for s in shards]), y)


def test_clm_bad_sharding_and_too_small_corpus():
    b = ClmBatches(_stream(), 16, 6, seed=0)
    with pytest.raises(UserError, match="divisible"):
        b.get(0, rank=0, world_size=4)
    with pytest.raises(UserError, match="rank"):
        b.get(0, rank=2, world_size=2)
    with pytest.raises(UserError, match="too small"):
        ClmBatches(_stream(16), seq_len=16, batch_size=2, seed=0)
    ClmBatches(_stream(17), seq_len=16, batch_size=2, seed=0).get(0)  # exactly one window fits


def test_clm_val_batches_fixed_non_overlapping_and_complete():
    tokens = _stream(1000)
    b = ClmBatches(tokens, seq_len=32, batch_size=4, seed=0)
    first, second = list(b.val_batches()), list(b.val_batches())
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(first, second))
    inputs = torch.cat([x for x, _ in first]).flatten().numpy()
    labels = torch.cat([y for _, y in first]).flatten().numpy()
    assert len(np.unique(inputs)) == len(inputs)  # windows do not overlap
    assert len(labels) == (len(tokens) - 1) // 32 * 32  # every full window's tokens predicted once
    assert len(list(b.val_batches(max_batches=2))) == 2
    assert ClmBatches(tokens, 32, 4, seed=9).val_batches().__next__()[0].equal(first[0][0])


# --- masked LM -------------------------------------------------------------------------


def _docs(lengths, base=100):
    """Documents whose tokens are distinct (doc i uses values base + 1000 i + k), each closed by EOD."""
    parts = [np.append(np.arange(base + 1000 * i, base + 1000 * i + n - 1), EOD) for i, n in enumerate(lengths)]
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
    return np.concatenate(parts).astype(np.uint16), starts.astype(np.int64)


def _mlm(tokens, starts, seq_len=16, batch_size=8, seed=0, p=0.15, vocab=30000):
    return MlmBatches(tokens, starts, seq_len, batch_size, seed, p, MASK, PAD, vocab, SPECIALS)


def test_mlm_rows_come_from_one_document_and_short_ones_are_padded():
    tokens, starts = _docs([5, 40, 16, 3, 100])
    b = _mlm(tokens, starts, seq_len=16, batch_size=32)
    for step in range(5):
        ids, labels, attn = b.get(step)
        original = torch.where(labels != IGNORE_INDEX, labels, ids)  # undo the masking
        for row, a in zip(original, attn):
            n = int(a.sum())
            assert torch.all(a[:n] == 1) and torch.all(a[n:] == 0)  # right padding only
            assert torch.all(row[n:] == PAD)
            real = row[:n].numpy()
            body = real[real != EOD]
            assert len(set(body // 1000)) <= 1  # never across a document boundary
            assert np.all(np.diff(body) == 1)  # a contiguous piece of the document
            assert EOD not in real[:-1]
        assert torch.all(labels[attn == 0] == IGNORE_INDEX)  # no loss on pads


def test_mlm_deterministic_seeds_differ_and_shards_concatenate():
    tokens, starts = _docs([50] * 40)
    a, b = _mlm(tokens, starts, seed=4), _mlm(tokens, starts, seed=4)
    assert all(torch.equal(u, v) for u, v in zip(a.get(9), b.get(9)))
    assert not torch.equal(a.get(9)[1], a.get(10)[1])
    assert not torch.equal(a.get(9)[1], _mlm(tokens, starts, seed=5).get(9)[1])
    full = a.get(3)
    for world in (2, 4):
        shards = [a.get(3, rank=r, world_size=world) for r in range(world)]
        for k in range(3):
            assert torch.equal(torch.cat([s[k] for s in shards]), full[k])


def test_mlm_val_batches_are_fixed_and_cover_every_chunk_once():
    tokens, starts = _docs([5, 40, 16, 3, 100])
    b = _mlm(tokens, starts, seq_len=16, batch_size=4, seed=1)
    first = list(b.val_batches())
    again = list(_mlm(tokens, starts, seq_len=16, batch_size=4, seed=2).val_batches())
    assert all(all(torch.equal(u, v) for u, v in zip(p, q)) for p, q in zip(first, again))
    attn = torch.cat([a for _, _, a in first])
    assert int(attn.sum()) == len(tokens)  # every token in exactly one validation sequence
    assert len(attn) == b.n_chunks == 1 + 3 + 1 + 1 + 7
    assert len(list(b.val_batches(max_batches=1))) == 1


def test_mlm_too_small_and_bad_arguments():
    with pytest.raises(UserError, match="too small"):
        _mlm(np.zeros(0, np.uint16), np.zeros(0, np.int64))
    tokens, starts = _docs([10])
    with pytest.raises(UserError, match="vocab_size"):
        _mlm(tokens, starts, vocab=3)
    with pytest.raises(UserError, match="divisible"):
        _mlm(tokens, starts, batch_size=6).get(0, world_size=4)


def _z(count, n, p):
    return (count - n * p) / math.sqrt(n * p * (1 - p))


def test_bert_masking_proportions_on_a_large_sample():
    vocab, p = 1000, 0.15
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (2000, 256), generator=gen)
    ids[:, ::37] = EOD  # specials in the text are never selected
    attn = torch.ones_like(ids)
    attn[:1000, 200:] = 0  # padding: never selected
    ids[:1000, 200:] = PAD
    attn[1000:, 250:] = 0  # masked out by attention alone (ordinary ids there): never selected
    masked, labels = mask_tokens(ids, attn, p, MASK, vocab, SPECIALS, gen)

    candidate = (attn == 1) & (ids != EOD)
    selected = labels != IGNORE_INDEX
    assert not torch.any(selected & ~candidate)  # labels only on real, non-special tokens
    assert torch.equal(labels[selected], ids[selected])  # label = the original token
    assert torch.equal(masked[~selected], ids[~selected])  # unselected positions untouched
    n, k = int(candidate.sum()), int(selected.sum())
    assert abs(_z(k, n, p)) < 5  # 15% selected, within 5 binomial standard deviations

    to_mask = selected & (masked == MASK)
    changed = selected & (masked != MASK) & (masked != ids)
    kept = selected & (masked == ids)
    n_other = vocab - len(SPECIALS)  # a random replacement equals the original 1 time in n_other
    assert abs(_z(int(to_mask.sum()), k, 0.8)) < 5
    assert abs(_z(int(changed.sum()), k, 0.1 * (1 - 1 / n_other))) < 5
    assert abs(_z(int(kept.sum()), k, 0.1 + 0.1 / n_other)) < 5
    rand = masked[changed]
    assert int(rand.min()) >= 3 and int(rand.max()) < vocab  # random tokens are never special
    assert len(torch.unique(rand)) > 0.9 * n_other  # and spread over the whole vocabulary


def test_mlm_batches_mask_fifteen_percent_and_respect_mask_prob():
    tokens, starts = _docs([300] * 20)
    for p in (0.15, 0.4):
        b = _mlm(tokens, starts, seq_len=64, batch_size=64, p=p)
        sel = cand = 0
        for step in range(20):
            ids, labels, attn = b.get(step)
            original = torch.where(labels != IGNORE_INDEX, labels, ids)
            cand += int(((attn == 1) & (original != EOD)).sum())
            sel += int((labels != IGNORE_INDEX).sum())
        assert abs(_z(sel, cand, p)) < 5


def test_mask_tokens_without_attention_mask():
    ids = torch.full((4, 1000), 7)
    masked, labels = mask_tokens(ids, None, 0.5, MASK, 50, SPECIALS, torch.Generator().manual_seed(1))
    assert 0.4 < float((labels == 7).float().mean()) < 0.6
