from blocklab.model.base import init_weights, sinusoidal
from blocklab.model.build import build_model
from blocklab.model.model import ModelOutput, TransformerLM
from blocklab.model.params import (
    block_matrices,
    count_parameters,
    gathered,
    muon_split,
    no_weight_decay,
    param_groups,
)
from blocklab.model.seq2seq import Seq2Seq, Seq2SeqOutput

__all__ = [
    "ModelOutput",
    "Seq2Seq",
    "Seq2SeqOutput",
    "TransformerLM",
    "build_model",
    "init_weights",
    "sinusoidal",
    "block_matrices",
    "count_parameters",
    "gathered",
    "muon_split",
    "no_weight_decay",
    "param_groups",
]
