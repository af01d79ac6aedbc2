"""Training and validation batches for causal (clm) and masked (mlm) language models.

Batches are a pure function of (seed, step): there is no iterator state to save, so a
resumed run sees exactly the batches the uninterrupted run would have seen. Under data
parallelism every rank draws the same global batch and keeps its contiguous slice, so the
concatenation of the ranks' shards is the single-process batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from blocklab.data.config import ConfigError
from blocklab.errors import UserError
from blocklab.tokens import IGNORE_INDEX  # noqa: F401  (re-exported by blocklab.data)

VAL_MASK_SEED = 0  # validation masks ignore the training seed: runs compare on one fixed set
# Independent random streams derived from the same (seed, step).
_CLM_OFFSETS, _MLM_ROWS, _MLM_MASKS, _VAL_MASKS = 0, 1, 2, 3


def check_int(name: str, value, lo: int) -> None:
    """ConfigError unless `value` is an integer (not a bool) >= lo."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(f"{name}={value!r} is invalid: expected an integer >= {lo}")


def stream_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    """The generator of the random stream `stream` at (seed, step): a batch is a pure function of the three."""
    check_int("step", step, 0)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(step), stream])))


def _torch_generator(seed: int, step: int, stream: int) -> torch.Generator:
    state = np.random.SeedSequence([int(seed), int(step), stream]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state) >> 1)


def rank_rows(batch_size: int, rank: int, world_size: int) -> slice:
    """The rows of a global batch that process `rank` of `world_size` takes (equal consecutive shares)."""
    check_int("world_size", world_size, 1)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ConfigError(f"rank={rank!r} is invalid: expected an integer in [0, {world_size - 1}]")
    if batch_size % world_size:
        raise ConfigError(f"batch_size {batch_size} is not divisible by the number of processes {world_size}")
    per = batch_size // world_size
    return slice(rank * per, (rank + 1) * per)


class ClmBatches:
    """Windows of seq_len + 1 tokens from the joined token stream (documents separated by
    <eod>, as in GPT-2 / CodeParrot training). Labels are aligned with the inputs: the
    label at position t is the token after input t, so the model does not shift."""

    def __init__(self, tokens: np.ndarray, seq_len: int, batch_size: int, seed: int):
        check_int("seq_len", seq_len, 1)
        check_int("batch_size", batch_size, 1)
        check_int("seed", seed, 0)
        if np.ndim(tokens) != 1:
            raise ValueError(f"tokens must be a 1-D array, got shape {np.shape(tokens)}")
        if len(tokens) < seq_len + 1:
            raise UserError(
                f"corpus too small for one batch: {len(tokens)} tokens, but a causal LM window needs "
                f"seq_len + 1 = {seq_len + 1}; use a larger corpus or a smaller data.seq_len"
            )
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.n_offsets = len(tokens) - seq_len  # window starts 0 .. len - seq_len - 1
        self.tokens_per_step = batch_size * seq_len  # input tokens of one global batch (throughput)

    def _windows(self, offsets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = offsets[:, None] + np.arange(self.seq_len + 1)
        w = torch.from_numpy(np.asarray(self.tokens[idx], dtype=np.int64))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def get(self, step: int, rank: int = 0, world_size: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        rows = rank_rows(self.batch_size, rank, world_size)
        # Draw the whole global batch, then slice: every rank agrees on it.
        offsets = stream_rng(self.seed, step, _CLM_OFFSETS).integers(0, self.n_offsets, size=self.batch_size)
        return self._windows(offsets[rows])

    @property
    def n_val_windows(self) -> int:
        return (self.n_offsets + self.seq_len - 1) // self.seq_len

    def val_batches(self, max_batches: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Consecutive windows with stride seq_len, so every token is predicted exactly once;
        the last batch may be smaller. The same windows on every call."""
        offsets = np.arange(0, self.n_offsets, self.seq_len, dtype=np.int64)
        for i, b in enumerate(range(0, len(offsets), self.batch_size)):
            if max_batches is not None and i >= max_batches:
                return
            yield self._windows(offsets[b : b + self.batch_size])


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    mask_prob: float,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking. Each real, non-special token is selected with probability mask_prob;
    a selected token becomes mask_id (80%), a random non-special token (10%) or stays (10%).
    labels holds the original token at selected positions and -100 everywhere else, so the
    loss covers exactly the selected positions (never padding, never specials)."""
    dev = generator.device if generator is not None else input_ids.device
    shape = input_ids.shape
    ids = input_ids.to(dev)
    special = torch.tensor(sorted(set(int(i) for i in special_ids)), dtype=ids.dtype, device=dev)
    candidate = ~torch.isin(ids, special)
    if attention_mask is not None:
        candidate &= attention_mask.to(dev).bool()
    selected = candidate & (torch.rand(shape, generator=generator, device=dev) < mask_prob)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))

    r = torch.rand(shape, generator=generator, device=dev)
    to_mask = selected & (r < 0.8)
    to_random = selected & (r >= 0.8) & (r < 0.9)
    allowed = torch.arange(vocab_size, dtype=ids.dtype, device=dev)
    allowed = allowed[~torch.isin(allowed, special)]
    random_ids = allowed[torch.randint(len(allowed), shape, generator=generator, device=dev)]
    out = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    out = torch.where(to_random, random_ids, out)
    return out.to(input_ids.device), labels.to(input_ids.device)


class MlmBatches:
    """Sequences of up to seq_len tokens from within one document (BERT-style: a document
    boundary never falls inside a sequence). Each document is cut into consecutive chunks of
    seq_len tokens (its final <eod> included, which is special and never masked); a row is a
    chunk drawn uniformly, so long documents are sampled in proportion to their length.
    Short chunks are right-padded with pad_id and attention_mask 0."""

    def __init__(
        self, tokens, doc_starts, seq_len, batch_size, seed, mask_prob, mask_id, pad_id, vocab_size, special_ids
    ):
        check_int("seq_len", seq_len, 1)
        check_int("batch_size", batch_size, 1)
        check_int("seed", seed, 0)
        check_int("vocab_size", vocab_size, 1)
        if isinstance(mask_prob, bool) or not isinstance(mask_prob, (int, float)) or not 0 < mask_prob <= 1:
            raise ConfigError(f"mask_prob={mask_prob!r} is invalid: expected a number in (0, 1]")
        specials = set(int(i) for i in special_ids) | {int(mask_id), int(pad_id)}
        if not all(0 <= i < vocab_size for i in (mask_id, pad_id)) or len(specials) >= vocab_size:
            raise ConfigError(
                f"vocab_size {vocab_size} leaves no ordinary tokens besides the special ids {sorted(specials)}"
            )
        if np.ndim(tokens) != 1:
            raise ValueError(f"tokens must be a 1-D array, got shape {np.shape(tokens)}")
        starts = np.asarray(doc_starts, dtype=np.int64)
        if len(tokens) == 0 or len(starts) == 0:
            raise UserError("corpus too small for one batch: no tokens for the masked LM")
        if starts.ndim != 1 or starts[0] != 0 or np.any(np.diff(starts) < 0) or starts[-1] >= len(tokens):
            raise ValueError("doc_starts must be sorted offsets into tokens, starting at 0")

        ends = np.append(starts[1:], len(tokens))
        n_chunks = -(-(ends - starts) // seq_len)  # ceil division; empty documents give 0
        doc = np.repeat(np.arange(len(starts)), n_chunks)
        k = np.arange(len(doc)) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
        self.chunk_start = starts[doc] + k * seq_len
        self.chunk_len = np.minimum(seq_len, ends[doc] - self.chunk_start)
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.mask_prob, self.mask_id, self.pad_id = mask_prob, int(mask_id), int(pad_id)
        self.vocab_size, self.special_ids = vocab_size, tuple(sorted(specials))
        self.tokens_per_step = batch_size * seq_len  # padded rows of one global batch (throughput)

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_start)

    def _rows(self, chunks: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        pos = np.arange(self.seq_len)
        valid = pos[None, :] < self.chunk_len[chunks][:, None]
        idx = np.where(valid, self.chunk_start[chunks][:, None] + pos, 0)
        ids = np.where(valid, np.asarray(self.tokens[idx], dtype=np.int64), self.pad_id)
        return torch.from_numpy(ids), torch.from_numpy(valid.astype(np.int64))

    def _masked(self, chunks: np.ndarray, gen: torch.Generator):
        ids, attn = self._rows(chunks)
        masked, labels = mask_tokens(ids, attn, self.mask_prob, self.mask_id, self.vocab_size, self.special_ids, gen)
        return masked, labels, attn

    def get(self, step: int, rank: int = 0, world_size: int = 1):
        rows = rank_rows(self.batch_size, rank, world_size)
        # Masks are drawn for the whole global batch (cheap) so that a row's mask does not
        # depend on which rank holds it.
        chunks = stream_rng(self.seed, step, _MLM_ROWS).integers(0, self.n_chunks, size=self.batch_size)
        masked, labels, attn = self._masked(chunks, _torch_generator(self.seed, step, _MLM_MASKS))
        return masked[rows], labels[rows], attn[rows]

    def val_batches(self, max_batches: int | None = None):
        """Every chunk once, in order, with masks fixed by the batch index: the same
        inputs and labels on every call and for every training seed."""
        for i, b in enumerate(range(0, self.n_chunks, self.batch_size)):
            if max_batches is not None and i >= max_batches:
                return
            chunks = np.arange(b, min(b + self.batch_size, self.n_chunks))
            yield self._masked(chunks, _torch_generator(VAL_MASK_SEED, i, _VAL_MASKS))
