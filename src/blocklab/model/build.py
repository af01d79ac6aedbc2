"""build_model: the model a ModelConfig describes."""
from __future__ import annotations

import torch.nn as nn

from blocklab.config import ModelConfig
from blocklab.model.model import TransformerLM
from blocklab.model.seq2seq import Seq2Seq


def build_model(cfg: ModelConfig) -> nn.Module:
    """A TransformerLM (clm, mlm) or, for task="translation", the encoder-decoder of model/seq2seq.py."""
    return Seq2Seq(cfg) if cfg.task == "translation" else TransformerLM(cfg)
