"""Which parameters get weight decay: matrices do; gains, norms and biases (all < 2-D) do not."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor


def no_weight_decay(param: nn.Parameter) -> bool:
    """Gains (alpha, beta, gamma, beta_FF, ...), norm weights and biases are all scalars or vectors."""
    return param.dim() < 2


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two optimizer groups: decayed matrices and embeddings, undecayed gains, norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if not no_weight_decay(p)], "weight_decay": weight_decay},
        {"params": [p for p in params if no_weight_decay(p)], "weight_decay": 0.0},
    ]


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


def gathered(t: torch.Tensor) -> torch.Tensor:
    """The whole of a tensor that FSDP holds in shards (a DTensor), gathered from every process: a
    collective, which each process must call; any other tensor as it is."""
    return t.full_tensor() if isinstance(t, DTensor) else t
