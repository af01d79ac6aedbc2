"""Batches of labelled examples for `task="classification"`: encoded once, drawn by epoch.

Each input is `<eod> text` or `<eod> text <eod> pair`: the <eod> that starts it is the position
the "first" pooling reads (BERT's [CLS]); an mlm run saw <eod> before every document, so it is not
a new symbol to the encoder. Too-long inputs lose tokens from the longer text first (BERT's
longest-first truncation), or are dropped where the caller asks (the code tasks: a mutation cut
off would leave a label the text no longer shows).

Like the language-model batches, a batch is a pure function of (seed, step): example p of the
training stream is `permutation(seed, epoch)[p % N]` with p = step * batch_size + row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from blocklab.data.batches import check_int, rank_rows, stream_rng
from blocklab.data.examples import Example
from blocklab.errors import UserError
from blocklab.tokens import EOD_ID, PAD_ID

_EPOCH_ORDER = 4  # the random stream of the epoch permutations (batches.py uses 0..3)


@dataclass
class Encoded:
    ids: list[np.ndarray]  # one int64 array per example
    labels: np.ndarray  # int64 class indices, or float32 targets (regression)
    units: list[str]  # what max_examples keeps or drops whole: Example.group, else Example.doc
    dropped: int = 0  # examples left out as too long (drop_long)
    truncated: int = 0  # examples shortened to fit

    def cap(self, n: int | None, order: Callable[[str], float]) -> Encoded:
        """About n examples (at least n, and never half a unit: the two versions of a mutated function
        stay together), the units taken in `order`. By function rather than by file: a file holds up
        to hundreds of functions, and one file must not make up a whole validation split (the splits
        themselves are by file, data/downstream.py)."""
        if n is None or len(self.ids) <= n:
            return self
        counts: dict[str, int] = {}
        for d in self.units:
            counts[d] = counts.get(d, 0) + 1
        keep, total = set(), 0
        for d in sorted(counts, key=order):
            if total >= n:
                break
            keep.add(d)
            total += counts[d]
        index = [i for i, d in enumerate(self.units) if d in keep]
        return Encoded(
            [self.ids[i] for i in index],
            self.labels[index],
            [self.units[i] for i in index],
            self.dropped,
            self.truncated,
        )


def _fit(a: list[int], b: list[int] | None, room: int) -> tuple[list[int], list[int] | None]:
    """Longest-first truncation of the two texts to `room` tokens together."""
    if b is None:
        return a[:room], None
    while len(a) + len(b) > room:
        if len(a) >= len(b):
            a = a[:-1]
        else:
            b = b[:-1]
    return a, b


def encode_examples(
    tokenizer, examples: Sequence[Example], max_len: int, regression: bool, drop_long: bool = False
) -> Encoded:
    """Token ids of every example (`<eod> text [<eod> pair]`, at most max_len) and its label. With
    drop_long, an example too long to fit is left out together with its group (Example.group)."""
    texts = tokenizer.encode_batch([e.text for e in examples], add_special_tokens=False)
    pair_ids = tokenizer.encode_batch([e.text_pair or "" for e in examples], add_special_tokens=False)
    rows = []  # (example, text ids, pair ids or None, fits)
    for e, a, b in zip(examples, texts, pair_ids):
        b = b.ids if e.text_pair is not None else None
        room = max_len - 1 - (b is not None)  # the leading <eod> and the separator
        rows.append((e, a.ids, b, len(a.ids) + len(b or []) <= room, room))
    too_long = {e.group for e, *_, fits, _ in rows if not fits and e.group} if drop_long else set()
    ids, labels, units, dropped, truncated = [], [], [], 0, 0
    for e, a, b, fits, room in rows:
        if drop_long and (not fits or e.group in too_long):
            dropped += 1
            continue
        if not fits:
            a, b = _fit(a, b, room)
            truncated += 1
        row = [EOD_ID] + a + ([EOD_ID] + b if b is not None else [])
        ids.append(np.asarray(row, dtype=np.int64))
        labels.append(e.label)
        units.append(e.group or e.doc)
    dtype = np.float32 if regression else np.int64
    return Encoded(ids, np.asarray(labels, dtype=dtype), units, dropped, truncated)


def pad_rows(rows: Sequence[np.ndarray], length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, T) ids and their attention mask; T = `length`, or the longest row (no work on
    padding beyond the batch's own)."""
    T = length or max(len(r) for r in rows)
    ids = np.full((len(rows), T), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(rows), T), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


class LabelledBatches:
    """(ids, attention mask, labels) batches of one split."""

    def __init__(self, data: Encoded, batch_size: int, seed: int, what: str = "training", pad_to: int | None = None):
        """pad_to: every batch padded to this length (a compiled model sees one shape, not one per
        batch, which would recompile it); None: to the batch's longest example."""
        check_int("batch_size", batch_size, 1)
        check_int("seed", seed, 0)
        if not data.ids:
            raise UserError(f"the {what} split has no examples that fit the model's sequence length")
        self.data, self.batch_size, self.seed, self.pad_to = data, batch_size, seed, pad_to
        self.n = len(data.ids)
        # Tokens of one global batch for the throughput count: the mean example, not the padding.
        self.tokens_per_step = max(1, round(batch_size * float(np.mean([len(r) for r in data.ids]))))

    def steps_per_epoch(self) -> int:
        return -(-self.n // self.batch_size)

    def _batch(self, index: np.ndarray):
        ids, mask = pad_rows([self.data.ids[i] for i in index], self.pad_to)
        return ids, mask, torch.from_numpy(self.data.labels[index])

    def get(self, step: int, rank: int = 0, world_size: int = 1):
        rows = rank_rows(self.batch_size, rank, world_size)
        p = step * self.batch_size + np.arange(self.batch_size)
        epochs, pos = p // self.n, p % self.n
        index = np.empty(self.batch_size, dtype=np.int64)
        for e in np.unique(epochs):  # one epoch, or two where the batch crosses the end of one
            perm = stream_rng(self.seed, int(e), _EPOCH_ORDER).permutation(self.n)
            index[epochs == e] = perm[pos[epochs == e]]
        return self._batch(index[rows])

    def val_batches(self, max_batches: int | None = None) -> Iterator:
        """Every example once, in order; the last batch may be smaller."""
        for i, b in enumerate(range(0, self.n, self.batch_size)):
            if max_batches is not None and i >= max_batches:
                return
            yield self._batch(np.arange(b, min(b + self.batch_size, self.n)))
