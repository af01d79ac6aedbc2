"""Translation runs: the parallel corpus, sentence-pair batches, the loss and BLEU at evaluation steps.

The parts of the translation task (training/tasks/translation.py joins them for the trainer), and
the decoding `blocklab translate` uses. Every function takes what it needs, never the trainer.

Batches: `train.batch_size` sentence pairs, drawn as a pure function of (seed, step) (an epoch-wise
permutation of the training pairs), so a resumed run sees the batches the uninterrupted run would.
Pairs whose source or target (with its <eod>) is longer than `data.seq_len` tokens are left out, in
both splits, and counted in the log. Source: the ids and <eod>; decoder input: <eod> and the target;
labels: the target and <eod>; padding is <pad> in the inputs and ignored in the labels.

BLEU (sacrebleu, its default 13a tokenisation, on detokenized text) at each evaluation, with greedy
decoding, on the same validation pairs the evaluation loss uses: the first `eval_batches x batch_size`
of the validation split (all of them when there are fewer).
"""

from __future__ import annotations

import numpy as np
import torch

from blocklab.data.bitext import PairIndex, ParallelCorpus, prepare_parallel
from blocklab.errors import UserError
from blocklab.tokens import EOS_ID, IGNORE_INDEX, PAD_ID
from blocklab.training.distributed import to_device

_TRAIN_ORDER = 7  # the random stream of the training order (data/batches.py uses 0-3)


def prepare_corpus(cfg, log=print) -> ParallelCorpus:
    """The run's parallel corpus, with the stall reference matched to its training objective."""
    corpus = prepare_parallel(cfg.data, log=log)
    corpus.label_smoothing = cfg.train.label_smoothing
    if (corpus.pad_id, corpus.eod_id) != (PAD_ID, EOS_ID):
        raise UserError(
            f"the tokenizer's <pad>/<eod> ids {corpus.pad_id}/{corpus.eod_id} are not the model's {PAD_ID}/{EOS_ID}"
        )
    return corpus


def collate(pairs: PairIndex, rows, pad_id: int, eos_id: int):
    """(source ids, source mask, decoder input ids, labels) as LongTensors for the pairs `rows`."""
    srcs = [pairs.source(i) for i in rows]
    tgts = [pairs.target(i) for i in rows]
    B, S, T = len(rows), max(map(len, srcs)), max(map(len, tgts))
    src = np.full((B, S), pad_id, dtype=np.int64)
    mask = np.zeros((B, S), dtype=np.int64)
    dec = np.full((B, T), pad_id, dtype=np.int64)
    labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
    for b, (s, t) in enumerate(zip(srcs, tgts)):
        src[b, : len(s)], mask[b, : len(s)] = s, 1
        dec[b, 0], dec[b, 1 : len(t)] = eos_id, t[:-1]
        labels[b, : len(t)] = t
    return tuple(torch.from_numpy(a) for a in (src, mask, dec, labels))


class TranslationBatches:
    def __init__(self, pairs: PairIndex, seq_len: int, batch_size: int, seed: int, pad_id: int, eos_id: int):
        self.pairs, self.batch_size, self.seed = pairs, batch_size, seed
        self.pad_id, self.eos_id = pad_id, eos_id
        src_len, tgt_len = np.diff(pairs.src, axis=1)[:, 0], np.diff(pairs.tgt, axis=1)[:, 0]
        self.keep = np.flatnonzero((src_len <= seq_len) & (tgt_len <= seq_len))
        self.dropped = len(pairs) - len(self.keep)
        if len(self.keep) == 0:
            raise UserError(f"no sentence pair fits data.seq_len={seq_len} tokens; raise data.seq_len")
        kept = self.keep
        # Real (unpadded) source + target tokens of an average batch: the throughput's token count.
        self.tokens_per_step = int(round(batch_size * float(np.mean(src_len[kept] + tgt_len[kept]))))

    def _order(self, epoch: int) -> np.ndarray:
        ss = np.random.SeedSequence([int(self.seed), int(epoch), _TRAIN_ORDER])
        return self.keep[np.random.Generator(np.random.PCG64(ss)).permutation(len(self.keep))]

    def get(self, step: int, rank: int = 0, world_size: int = 1):
        if self.batch_size % world_size:
            raise UserError(f"batch_size {self.batch_size} is not divisible by the number of processes {world_size}")
        n, per = len(self.keep), self.batch_size // world_size
        positions = step * self.batch_size + rank * per + np.arange(per)
        rows, orders = [], {}
        for p in positions.tolist():
            epoch = p // n
            if epoch not in orders:
                orders[epoch] = self._order(epoch)
            rows.append(orders[epoch][p % n])
        return collate(self.pairs, rows, self.pad_id, self.eos_id)

    def eval_rows(self, n_batches: int) -> np.ndarray:
        return self.keep[: n_batches * self.batch_size]

    def val_batches(self, n_batches: int):
        rows = self.eval_rows(n_batches)
        for i in range(0, len(rows), self.batch_size):
            yield collate(self.pairs, rows[i : i + self.batch_size], self.pad_id, self.eos_id)


def make_batches(corpus: ParallelCorpus, data_cfg, train_cfg, log=print):
    args = dict(
        seq_len=data_cfg.seq_len,
        batch_size=train_cfg.batch_size,
        seed=train_cfg.seed,
        pad_id=corpus.pad_id,
        eos_id=corpus.eod_id,
    )
    train, val = TranslationBatches(corpus.train, **args), TranslationBatches(corpus.val, **args)
    if train.dropped or val.dropped:
        log(
            f"data: {train.dropped:,} train / {val.dropped:,} val pairs longer than data.seq_len={data_cfg.seq_len} "
            "tokens left out"
        )
    return train, val


def loss_terms(model, batch, device, autocast, label_smoothing: float = 0.0):
    """Summed token loss and token count of a batch (see Task.loss); `label_smoothing` is the
    training objective's (the caller passes 0 at evaluation)."""
    src, mask, dec, labels = (to_device(x, device) for x in batch)
    with autocast():
        loss_sum = model(
            src,
            mask,
            decoder_input_ids=dec,
            labels=labels,
            loss_reduction="sum",
            return_logits=False,
            label_smoothing=label_smoothing,
        ).loss
    return loss_sum, (labels != IGNORE_INDEX).sum()


def loss_count(batch) -> torch.Tensor:
    """The token count of loss_terms, without the forward pass."""
    return (batch[3] != IGNORE_INDEX).sum()


def detokenize(tokenizer, eod_id: int, ids) -> str:
    """Text of generated ids: the start token dropped, cut at the first <eod>."""
    ids = [int(i) for i in ids]
    if ids and ids[0] == eod_id:
        ids = ids[1:]
    if eod_id in ids:
        ids = ids[: ids.index(eod_id)]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


@torch.no_grad()
def translate_ids(
    model,
    sources: list[list[int]],
    pad_id: int,
    device,
    batch_size: int = 32,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
    length_penalty: float = 1.0,
) -> list[list[int]]:
    """Generated ids for each source (ids ending in <eod>), in order; batches sorted by length."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list = [None] * len(sources)
    limit = max_new_tokens or model.cfg.max_seq_len
    for i in range(0, len(order), batch_size):
        rows = order[i : i + batch_size]
        S = max(len(sources[r]) for r in rows)
        src = torch.full((len(rows), S), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), S), dtype=torch.long)
        for b, r in enumerate(rows):
            src[b, : len(sources[r])], mask[b, : len(sources[r])] = torch.tensor(sources[r]), 1
        ids = model.generate(
            src.to(device), mask.to(device), max_new_tokens=limit, num_beams=num_beams, length_penalty=length_penalty
        )
        for b, r in enumerate(rows):
            out[r] = ids[b].tolist()
    return out


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu

    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


def evaluate_bleu(model, tokenizer, val: TranslationBatches, eval_batches: int, batch_size: int, device) -> float:
    """BLEU of greedy translations of the evaluation pairs (the first `eval_batches` batches of `val`)."""
    rows = val.eval_rows(eval_batches)
    sources = [val.pairs.source(i).tolist() for i in rows]
    refs = [detokenize(tokenizer, val.eos_id, val.pairs.target(i)) for i in rows]
    was_training = model.training
    model.eval()
    try:
        out = translate_ids(model, sources, val.pad_id, device, batch_size)
        hyps = [detokenize(tokenizer, val.eos_id, ids) for ids in out]
    finally:
        model.train(was_training)
    return corpus_bleu(hyps, refs)


def record_bleu(state: dict, bleu: float) -> None:
    """The last and best BLEU of the run state."""
    best = state["best_bleu"]
    state.update(last_bleu=bleu, best_bleu=bleu if best is None else max(best, bleu))


def summary_fields(state: dict) -> dict:
    return {"final_bleu": state["last_bleu"], "best_bleu": state["best_bleu"]}
