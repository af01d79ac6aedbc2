"""The language model around the blocks: embeddings, the block stack, final norm and tied head."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.config import ModelConfig
from blocklab.model.base import TokenModel, init_weights


@dataclass
class ModelOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor | None  # None only when asked for with return_logits=False
    hidden_states: tuple[torch.Tensor, ...] | None = None


class TransformerLM(TokenModel):
    """Decoder (`clm`, causal) or encoder (`mlm`, bidirectional) language model built from one block type."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder_stack(cfg)
        self.output_head(cfg)
        init_weights(self, cfg)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids, "pos")

    def forward(
        self,
        input_ids,
        attention_mask=None,
        labels=None,
        output_hidden_states=False,
        loss_reduction: str = "mean",
        return_logits: bool = True,
        position_ids=None,
    ) -> ModelOutput:
        """`labels` are aligned with `input_ids` (labels[t] is the target of logits[t]); -100 is ignored.

        The loss never builds the fp32 (B, T, V) logits (model/loss.py); trainers pass
        return_logits=False so that no logits are formed at all, and loss_reduction="sum". `position_ids`
        (B, T): each token's position where it is not its index (left padding: blocklab.hf).
        """
        x, hidden = self.encode(input_ids, attention_mask, output_hidden_states, position_ids)
        logits, loss = self.logits_and_loss(x, labels, loss_reduction, return_logits)
        return ModelOutput(loss, logits, hidden)
