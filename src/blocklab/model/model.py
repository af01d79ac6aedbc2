"""The language model around the blocks: embeddings, the block stack, final norm and tied head."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from blocklab.blocks import REGISTRY
from blocklab.config import ModelConfig
from blocklab.layers import make_norm
from blocklab.model.loss import chunked_cross_entropy


@dataclass
class ModelOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor | None  # None only when asked for with return_logits=False
    hidden_states: tuple[torch.Tensor, ...] | None = None


def sinusoidal(T: int, d: int) -> torch.Tensor:
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(T, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq[: d // 2])
    return table


class TransformerLM(nn.Module):
    """Decoder (`clm`, causal) or encoder (`mlm`, bidirectional) language model built from one block type."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        spec = REGISTRY[cfg.block]
        d = cfg.d_model
        self.tok = nn.Embedding(cfg.vocab_size, d)
        if cfg.positions == "learned":
            self.pos = nn.Embedding(cfg.max_seq_len, d)
        else:
            self.register_buffer("pos_table", sinusoidal(cfg.max_seq_len, d), persistent=False)
        # Xiong et al./fairseq: embeddings ~ N(0, 1/d) scaled by sqrt(d) so E|x_0|^2 = d, while the
        # tied head still sees unit-scale weights.
        self.embed_scale = math.sqrt(d) if cfg.init == "xavier" else 1.0
        self.blocks = nn.ModuleList(spec.cls(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = make_norm(cfg.norm, d, cfg.norm_eps) if spec.final_norm else nn.Identity()
        self.head = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        init_weights(self, cfg)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        pos = self.pos.weight[:T] if self.cfg.positions == "learned" else self.pos_table[:T]
        return self.tok(input_ids) * self.embed_scale + pos

    @property
    def head_weight(self) -> torch.Tensor:
        return self.head.weight if self.head is not None else self.tok.weight

    def forward(self, input_ids, attention_mask=None, labels=None, output_hidden_states=False,
                loss_reduction: str = "mean", return_logits: bool = True) -> ModelOutput:
        """`labels` are aligned with `input_ids` (labels[t] is the target of logits[t]); -100 is ignored.

        The loss never builds the fp32 (B, T, V) logits (model/loss.py); trainers pass
        return_logits=False so that no logits are formed at all, and loss_reduction="sum".
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_seq_len={self.cfg.max_seq_len}")
        key_mask = attention_mask.bool() if attention_mask is not None else None
        x = self.embed(input_ids)
        hidden = [x]
        for block in self.blocks:
            x = block(x, key_mask)
            hidden.append(x)
        x = self.final_norm(x)
        logits = x @ self.head_weight.t() if return_logits else None
        loss = None
        if labels is not None:
            loss = chunked_cross_entropy(x, self.head_weight, labels, loss_reduction)
        return ModelOutput(loss, logits, tuple(hidden) if output_hidden_states else None)


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """`normal`: std 0.02 everywhere (He & Hofmann); `xavier`: Xavier-normal, embeddings N(0, 1/d) (Xiong et al.).

    Linear layers flagged `zero_init` (shaped attention's W^Q, the dW of I + dW) start at zero.
    """
    for m in model.modules():
        if isinstance(m, nn.Linear):
            if getattr(m, "zero_init", False):
                nn.init.zeros_(m.weight)
            elif cfg.init == "normal":
                nn.init.normal_(m.weight, std=0.02)
            else:
                nn.init.xavier_normal_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02 if cfg.init == "normal" else cfg.d_model ** -0.5)


def build_model(cfg: ModelConfig) -> nn.Module:
    """A TransformerLM (clm, mlm) or, for task="translation", the encoder-decoder of model/seq2seq.py."""
    if cfg.task == "translation":
        from blocklab.model.seq2seq import Seq2Seq

        return Seq2Seq(cfg)
    return TransformerLM(cfg)
