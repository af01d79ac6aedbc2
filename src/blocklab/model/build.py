"""build_model: the model a ModelConfig describes."""

from __future__ import annotations

import torch.nn as nn

from blocklab.config import ModelConfig
from blocklab.model.classifier import Classifier
from blocklab.model.model import TransformerLM
from blocklab.model.seq2seq import Seq2Seq


def build_model(cfg: ModelConfig) -> nn.Module:
    """A TransformerLM (clm, mlm), the encoder-decoder of model/seq2seq.py (translation) or the
    encoder with a classification head of model/classifier.py (classification)."""
    if cfg.task == "translation":
        return Seq2Seq(cfg)
    return Classifier(cfg) if cfg.task == "classification" else TransformerLM(cfg)
