"""Language modelling: `clm` (decoder-only, next-token loss) and `mlm` (encoder-only, BERT masking,
loss on the masked positions only), on the token corpus of data/corpus.py. One module, two tasks:
they share everything but their batches."""

from __future__ import annotations

from blocklab.data import ClmBatches, Corpus, MlmBatches, prepare
from blocklab.tokens import IGNORE_INDEX
from blocklab.training.distributed import to_device
from blocklab.training.tasks.base import Batches, Task


class LanguageModelling(Task):
    masked: bool

    def prepare(self, log) -> Corpus:
        return prepare(self.cfg.data, log=log)

    def batches(self, data: Corpus, log) -> Batches:
        d, t = self.cfg.data, self.cfg.train
        if not self.masked:
            return Batches(
                ClmBatches(data.train, d.seq_len, t.batch_size, t.seed),
                ClmBatches(data.val, d.seq_len, t.batch_size, t.seed),
            )
        args = dict(
            seq_len=d.seq_len,
            batch_size=t.batch_size,
            seed=t.seed,
            mask_prob=d.mask_prob,
            mask_id=data.mask_id,
            pad_id=data.pad_id,
            vocab_size=data.vocab_size,
            special_ids=data.special_ids,
        )
        return Batches(
            MlmBatches(data.train, data.train_doc_starts, **args), MlmBatches(data.val, data.val_doc_starts, **args)
        )

    def loss(self, model, batch, device, autocast):
        # clm: (ids, labels); mlm: (ids, labels, attention mask)
        ids, labels, *mask = (to_device(x, device) for x in batch)
        with autocast():  # the model's chunked loss: no (B, T, V) logits are formed
            loss_sum = model(
                ids, attention_mask=mask[0] if mask else None, labels=labels, loss_reduction="sum", return_logits=False
            ).loss
        return loss_sum, (labels != IGNORE_INDEX).sum()

    def loss_count(self, batch):
        return (batch[1] != IGNORE_INDEX).sum()


class CausalLM(LanguageModelling):
    masked = False


class MaskedLM(LanguageModelling):
    masked = True
