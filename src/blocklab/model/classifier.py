"""The classification model (`task="classification"`, docs/models.md#tasks): a bidirectional encoder of any
block, a pooled representation and BERT's head over it (a tanh pooler, then one Linear to n_labels).

Parameter names follow TransformerLM (`tok`, `pos`, `blocks.*`, `final_norm.*`), so the encoder of an
`mlm` checkpoint loads as it is and only `pooler` and `classifier` start fresh (training/finetune.py).
No dropout in the head: the papers' encoders use none, and blocks without dropout must stay so.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocklab.config import ModelConfig
from blocklab.model.base import TokenModel, init_weights
from blocklab.model.model import ModelOutput

HEAD = ("pooler", "classifier")  # the parameters a fine-tuning run adds to a pre-trained encoder


class Classifier(TokenModel):
    """logits = W_c tanh(W_p pool(encoder(x))) + b; cross-entropy over n_labels, or MSE when n_labels = 1."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder_stack(cfg)
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_labels)
        init_weights(self, cfg)

    def pool(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, T, d) -> (B, d): the first position, or the mean over the tokens the mask keeps."""
        if self.cfg.pooling == "first":
            return x[:, 0]
        if attention_mask is None:
            return x.mean(1)
        m = attention_mask.to(x.dtype).unsqueeze(-1)
        return (x * m).sum(1) / m.sum(1).clamp_min(1)

    def forward(
        self, input_ids, attention_mask=None, labels=None, output_hidden_states=False, loss_reduction: str = "mean"
    ) -> ModelOutput:
        """logits (B, n_labels); `labels` are class indices (B,), or float targets when n_labels = 1."""
        x, hidden = self.encode(input_ids, attention_mask, output_hidden_states)
        pooled = torch.tanh(self.pooler(self.pool(x, attention_mask)))
        logits = self.classifier(pooled).float()
        loss = None
        if labels is not None:
            if self.cfg.n_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.float(), reduction=loss_reduction)
            else:
                loss = F.cross_entropy(logits, labels.long(), reduction=loss_reduction)
        return ModelOutput(loss, logits, hidden)
