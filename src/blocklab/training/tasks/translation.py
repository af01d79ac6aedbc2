"""Translation (`model.task = "translation"`): the encoder-decoder on a parallel corpus, label
smoothing in training, BLEU at evaluation steps. The parts (corpus, batches, loss, decoding, BLEU)
live in training/translation.py; this module joins them into a task."""

from __future__ import annotations

from blocklab.data.bitext import ParallelCorpus
from blocklab.training import translation
from blocklab.training.tasks.base import Batches, Task


class Translation(Task):
    """The decoder blocks stay eager under compilation (`compile` of the base class compiles
    `model.blocks`, the encoder): cached decoding calls them with a new shape at every token."""

    def prepare(self, log) -> ParallelCorpus:
        return translation.prepare_corpus(self.cfg, log)

    def batches(self, data: ParallelCorpus, log) -> Batches:
        train, val = translation.make_batches(data, self.cfg.data, self.cfg.train, log)
        return Batches(train, val)

    def attention_layers(self, model) -> int:
        cfg = model.cfg  # each decoder block attends twice: to itself and to the source
        return cfg.n_layers + 2 * (cfg.n_decoder_layers or cfg.n_layers)

    def loss(self, model, batch, device, autocast):
        smoothing = self.cfg.train.label_smoothing if model.training else 0.0
        return translation.loss_terms(model, batch, device, autocast, smoothing)

    def loss_count(self, batch):
        return translation.loss_count(batch)

    def evaluate(self, model, data, val, device, state) -> dict:
        t = self.cfg.train
        # decoded in batches of a process's share when gradients are accumulated: what fits training fits here
        bleu = translation.evaluate_bleu(
            model, data.tokenizer, val, t.eval_batches, t.batch_size // t.grad_accum, device
        )
        translation.record_bleu(state, bleu)
        return {"bleu": bleu}

    def initial_state(self) -> dict:
        return {"last_bleu": None, "best_bleu": None}

    def summary_fields(self, state: dict) -> dict:
        return translation.summary_fields(state)
