"""The task seam: a task the trainer has never heard of (one class, one registry entry) trains."""

import json

import numpy as np
import pytest
import torch

from blocklab.tokens import IGNORE_INDEX
from blocklab.training import Trainer, load_config, train
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.tasks import TASKS, Batches, Task


class _Tokenizer:
    def save(self, path):
        with open(path, "w") as f:
            f.write("{}")


class _Data:
    tokenizer, vocab_size, unigram_entropy = _Tokenizer(), 16, None


class _ReverseBatches:
    """Sequences of random tokens; the label at t is the token at T-1-t (needs attention to learn)."""

    def __init__(self, seq_len, batch_size, seed, stream):
        self.seq_len, self.batch_size, self.seed, self.stream = seq_len, batch_size, seed, stream
        self.tokens_per_step = batch_size * seq_len

    def _batch(self, key, n):
        g = np.random.default_rng([self.seed, key, self.stream])
        ids = torch.from_numpy(g.integers(1, 16, size=(n, self.seq_len)))
        return ids, ids.flip(1)

    def get(self, step, rank=0, world_size=1):
        ids, labels = self._batch(step, self.batch_size)
        per = self.batch_size // world_size
        return ids[rank * per : (rank + 1) * per], labels[rank * per : (rank + 1) * per]

    def val_batches(self, max_batches=None):
        for i in range(max_batches or 1):
            yield self._batch(10_000 + i, self.batch_size)


class ReverseTask(Task):
    """Not a task the trainer knows: its own data, batches, loss, eval metric and summary field."""

    def prepare(self, log):
        log("fake: no corpus to prepare")
        return _Data()

    def batches(self, data, log):
        d, t = self.cfg.data, self.cfg.train
        return Batches(
            _ReverseBatches(d.seq_len, t.batch_size, t.seed, 0), _ReverseBatches(d.seq_len, t.batch_size, t.seed, 1)
        )

    def loss(self, model, batch, device, autocast):
        ids, labels = (x.to(device) for x in batch)
        labels = labels.masked_fill(torch.arange(ids.shape[1], device=device) < 2, IGNORE_INDEX)
        with autocast():
            loss_sum = model(ids, labels=labels, loss_reduction="sum", return_logits=False).loss
        return loss_sum, (labels != IGNORE_INDEX).sum()

    def loss_count(self, batch):
        return (batch[1][:, 2:] != IGNORE_INDEX).sum()  # the positions `loss` keeps

    def evaluate(self, model, data, val, device, state):
        state["reverse_evals"] += 1
        return {"reverse_evals": state["reverse_evals"]}

    def initial_state(self):
        return {"reverse_evals": 0}

    def summary_fields(self, state):
        return {"reverse_evals": state["reverse_evals"]}


def test_an_unknown_task_trains_through_the_registry(tmp_path, overrides, monkeypatch):
    monkeypatch.setitem(TASKS, "reverse", ReverseTask)
    overrides["data"].update(seq_len=8, vocab_size=300)
    overrides["model"].update(block="pre-ln", vocab_size=300)
    overrides["train"].update(steps=6, eval_every=3, checkpoint_every=3)
    cfg = load_config(None, overrides)
    cfg.model.task = "reverse"  # the model config knows only its own tasks; the trainer asks the registry
    s = train(cfg, tmp_path / "r", progress=False, log=lambda *a, **k: None)
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert s.status == "completed" and s.task == "reverse" and s.step == 6
    assert s.extra["reverse_evals"] == 2 and s.tokens == 6 * 4 * 8
    assert [r.get("reverse_evals") for r in rows] == [None, None, 1, None, None, 2]
    assert all(np.isfinite(r["loss"]) for r in rows) and "eval_loss" in rows[2]
    assert load_checkpoint(tmp_path / "r" / "checkpoints")["extra"]["reverse_evals"] == 2
    assert (tmp_path / "r" / "tokenizer.json").read_text() == "{}"


def test_the_trainer_takes_every_task_from_the_registry(overrides, tmp_path):
    trainer = Trainer(load_config(None, overrides), tmp_path / "r", progress=False, log=lambda *a, **k: None)
    try:
        assert type(trainer.task) is TASKS["clm"]
        assert trainer.batches.train.tokens_per_step == 4 * 32
    finally:
        trainer.dist.close()


def test_a_task_whose_two_counts_disagree_is_caught_at_the_first_step(tmp_path, overrides, monkeypatch):
    """loss_count must count what loss sums (the trainer divides by it): a mismatch stops the run."""
    monkeypatch.setitem(TASKS, "reverse", ReverseTask)
    monkeypatch.setattr(ReverseTask, "loss_count", lambda self, batch: (batch[1] != IGNORE_INDEX).sum())
    overrides["data"].update(seq_len=8, vocab_size=300)
    overrides["model"].update(block="pre-ln", vocab_size=300)
    cfg = load_config(None, overrides)
    cfg.model.task = "reverse"
    with pytest.raises(RuntimeError, match="ReverseTask.loss_count gives 32 loss terms for a batch whose loss has 24"):
        train(cfg, tmp_path / "r", progress=False, log=lambda *a, **k: None)
