"""The language model around the blocks: embeddings, the block stack, final norm and tied head."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from blocklab.blocks import REGISTRY
from blocklab.config import ModelConfig
from blocklab.layers import make_norm
from blocklab.model.base import TokenModel, check_ids, init_weights


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
        spec = REGISTRY[cfg.block]
        self.embeddings(cfg, "pos")
        self.blocks = nn.ModuleList(spec.cls(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if spec.final_norm else nn.Identity()
        self.output_head(cfg)
        init_weights(self, cfg)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids, "pos")

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=False,
                loss_reduction: str = "mean", return_logits: bool = True) -> ModelOutput:
        """`labels` are aligned with `input_ids` (labels[t] is the target of logits[t]); -100 is ignored.

        The loss never builds the fp32 (B, T, V) logits (model/loss.py); trainers pass
        return_logits=False so that no logits are formed at all, and loss_reduction="sum".
        """
        check_ids(input_ids)
        if input_ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_seq_len={self.cfg.max_seq_len}")
        key_mask = attention_mask.bool() if attention_mask is not None else None
        x, hidden = self.run_blocks(self.blocks, self.embed(input_ids), key_mask, output_hidden_states)
        logits, loss = self.logits_and_loss(self.final_norm(x), labels, loss_reduction, return_logits)
        return ModelOutput(loss, logits, hidden)
