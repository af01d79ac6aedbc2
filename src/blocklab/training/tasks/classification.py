"""Classification (`model.task = "classification"`): a bidirectional encoder with a head over a pooled
representation, on a code task or GLUE-layout data (data/downstream.py), scored as GLUE scores the
task (data/scores.py) at every evaluation step. From scratch, or fine-tuned: `train.init_from` names
an mlm run whose encoder and tokenizer it starts from (training/finetune.py, `blocklab finetune`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from blocklab.data.downstream import load_labelled, source_order
from blocklab.data.examples import LabelledData
from blocklab.data.labelled_batches import Encoded, LabelledBatches, encode_examples
from blocklab.data.scores import majority_baseline, score
from blocklab.data.tokenizer import train_tokenizer
from blocklab.errors import UserError
from blocklab.training import pretrained
from blocklab.training.config import compiles
from blocklab.training.distributed import to_device
from blocklab.training.tasks.base import Batches, Task


@dataclass
class ClassificationData:
    tokenizer: object
    vocab_size: int
    labelled: LabelledData
    train: Encoded
    val: Encoded
    info: dict
    unigram_entropy: float | None = None  # no stall detection: a classifier's loss has no unigram floor


_LOADED: dict[str, ClassificationData] = {}  # per process, the last few: see load_data


def load_data(cfg, log) -> ClassificationData:
    """The run's labelled data, encoded with the pre-trained run's tokenizer (or, from scratch, one
    trained on the task's training texts), with what the log and summary.json say about it.

    Kept in memory for the next run that asks for the same data (read-only once built): `finetune`
    counts the examples, then each seed's trainer prepares them again, and a sweep does so 90 times;
    encoding every example each time cost seconds per run."""
    key = repr((cfg.data, cfg.train.init_from, cfg.model.max_seq_len))
    if key not in _LOADED:
        while len(_LOADED) >= 2:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = _build_data(cfg, log)
    data = _LOADED[key]
    log(f"data: {data.labelled.name}: {_describe_line(data.info, data.labelled, cfg.model.max_seq_len)}")
    return data


def _describe_line(info: dict, labelled, max_len: int) -> str:
    drop = labelled.info.get("kind") == "code"
    return (
        f"{info['n_train']:,} training / {info['n_val']:,} validation examples, {labelled.n_labels} label(s), "
        f"metric {labelled.metric}; {info['label_counts']}; majority baseline {info['majority_baseline']:.1f}; "
        + (f"{info['dropped']:,} longer than {max_len} tokens left out" if drop else f"{info['truncated']:,} truncated")
    )


def _build_data(cfg, log) -> ClassificationData:
    pre = pretrained.pretraining_run(cfg.train.init_from) if cfg.train.init_from else None
    labelled = load_labelled(cfg.data, pre.data if pre else None, log)
    if pre is not None:
        tokenizer = pre.tokenizer
    else:
        tokenizer = train_tokenizer(
            (t for e in labelled.train for t in (e.text, e.text_pair) if t), cfg.data.vocab_size
        )
    # A mutated code token cut off by truncation would leave a label the text no longer shows.
    drop = labelled.info.get("kind") == "code"
    regression = labelled.label_names is None
    enc = [
        encode_examples(tokenizer, split, cfg.model.max_seq_len, regression, drop_long=drop)
        for split in (labelled.train, labelled.val)
    ]
    n = cfg.data.max_examples  # validation keeps a quarter of it, as the code tasks' split does
    enc = [enc[0].cap(n, source_order), enc[1].cap(None if n is None else max(1, n // 4), source_order)]
    for split, e, given in (("training", enc[0], labelled.train), ("validation", enc[1], labelled.val)):
        if not e.ids:
            raise UserError(
                f"{labelled.name}: none of the {len(given):,} {split} examples fits in model.max_seq_len="
                f"{cfg.model.max_seq_len} tokens"
                + (" (raise data.task_pool_mb or the pre-training seq_len)" if drop else "")
            )
    info = describe(labelled, *enc)
    return ClassificationData(tokenizer, tokenizer.get_vocab_size(), labelled, *enc, info=info)


class Classification(Task):
    def prepare(self, log) -> ClassificationData:
        data = load_data(self.cfg, log)
        if self.cfg.model.n_labels != data.labelled.n_labels:
            raise UserError(
                f"model.n_labels={self.cfg.model.n_labels} but {data.labelled.name} has "
                f"{data.labelled.n_labels} label(s); set --model.n_labels {data.labelled.n_labels}"
            )
        self.info = data.info
        return data

    def batches(self, data: ClassificationData, log) -> Batches:
        t = self.cfg.train
        # Compiled blocks recompile for every new sequence length (on an H100, fine-tuning hit dynamo's
        # limit of 8 and fell back to eager): pad to max_seq_len there; eager runs pad per batch.
        cuda = t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
        pad_to = self.cfg.model.max_seq_len if compiles(t, "cuda" if cuda else "cpu") else None
        return Batches(
            LabelledBatches(data.train, t.batch_size, t.seed, "training", pad_to),
            LabelledBatches(data.val, t.batch_size, t.seed, "validation", pad_to),
        )

    def build_model(self):
        model = super().build_model()
        if self.cfg.train.init_from:
            pretrained.load_encoder(model, self.cfg.train.init_from, self.cfg.train.init_step)
        return model

    def loss(self, model, batch, device, autocast):
        ids, mask, labels = (to_device(x, device) for x in batch)
        with autocast():
            loss_sum = model(ids, attention_mask=mask, labels=labels, loss_reduction="sum").loss
        return loss_sum, torch.tensor(labels.shape[0], device=device)

    def loss_count(self, batch):
        return torch.tensor(len(batch[2]))

    @torch.no_grad()
    def evaluate(self, model, data: ClassificationData, val, device, state) -> dict:
        preds, labels = [], []
        training = model.training
        model.eval()  # the trainer calls this in training mode; dropout must not score
        try:
            for ids, mask, y in val.val_batches():
                logits = model(ids.to(device), attention_mask=mask.to(device)).logits
                preds.append((logits.squeeze(-1) if data.labelled.label_names is None else logits.argmax(-1)).cpu())
                labels.append(y)
        finally:
            model.train(training)
        result = score(data.labelled.metric, torch.cat(preds).numpy(), torch.cat(labels).numpy())
        best = state.get("best_score")
        state.update(
            last_score=result["score"], best_score=result["score"] if best is None else max(best, result["score"])
        )
        return {k if k == "score" else f"score_{k}": v for k, v in result.items()}

    def initial_state(self) -> dict:
        return {"last_score": None, "best_score": None}

    def summary_fields(self, state: dict) -> dict:
        t = self.cfg.train
        return {
            "final_score": state.get("last_score"),
            "best_score": state.get("best_score"),
            "init_from": t.init_from,
            "init_step": t.init_step,
            **self.info,
        }


def describe(labelled: LabelledData, train: Encoded, val: Encoded) -> dict:
    """What the log and summary.json say about the data: sizes, balance, the majority baseline."""
    names = labelled.label_names
    if names is None:
        counts = f"targets {float(np.mean(train.labels)):.2f} ± {float(np.std(train.labels)):.2f}"
    else:
        n = np.bincount(train.labels, minlength=len(names))
        top = sorted(zip(n, names), reverse=True)[:5]
        counts = "training labels " + ", ".join(f"{name} {c / max(1, n.sum()):.0%}" for c, name in top)
    return {
        "task_name": labelled.name,
        "metric": labelled.metric,
        "n_labels": labelled.n_labels,
        "label_names": names,  # index = label (blocklab export names the outputs with them); None: regression
        "n_train": len(train.ids),
        "n_val": len(val.ids),
        "label_counts": counts,
        "majority_baseline": majority_baseline(train.labels, val.labels, labelled.metric)["score"],
        "dropped": train.dropped + val.dropped,
        "truncated": train.truncated + val.truncated,
    }
