from blocklab.model.model import ModelOutput, TransformerLM, build_model, init_weights
from blocklab.model.params import count_parameters, no_weight_decay, param_groups

__all__ = ["ModelOutput", "TransformerLM", "build_model", "init_weights",
           "count_parameters", "no_weight_decay", "param_groups"]
