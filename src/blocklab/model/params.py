"""Which parameters get weight decay (matrices do; gains, norms and biases, all < 2-D, do not) and which
ones Muon may take (the blocks' hidden matrices; train.optimizer muon, blocklab/optimizers.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor


def no_weight_decay(param: nn.Parameter) -> bool:
    """Gains (alpha, beta, gamma, beta_FF, ...), norm weights and biases are all scalars or vectors."""
    return param.dim() < 2


def param_groups(model: nn.Module, weight_decay: float, params: list[nn.Parameter] | None = None) -> list[dict]:
    """Two optimizer groups of `params` (default: every trainable parameter of the model): decayed matrices
    and embeddings, undecayed gains, norms and biases."""
    if params is None:
        params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if not no_weight_decay(p)], "weight_decay": weight_decay},
        {"params": [p for p in params if no_weight_decay(p)], "weight_decay": 0.0},
    ]


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of a token model: the encoder (or decoder-only) stack's, then a translation model's decoder's."""
    model = getattr(model, "module", model)  # DDP wraps the model in `.module`
    return [*getattr(model, "blocks", ()), *getattr(model, "decoder_blocks", ())]


def block_matrices(block: nn.Module) -> list[nn.Parameter]:
    """The hidden weight matrices of one block that Muon may take.

    A block that says which they are has a method `muon_matrices()` returning them (a block whose matrices
    live under a constraint says so there); every other block's are its 2-D parameters: the weights of its linear maps (the attention's W^Q, W^K, W^V,
    W^O, the MLP's, a gate's or a low-rank path's). Nothing else in a block is 2-D: its gains, norm weights,
    biases and scalars are vectors or scalars (no_weight_decay's rule, which every block keeps; a table of
    gains is stored flat, as Hyper-Connections' static alpha), so none of them reaches Muon either way. A
    declared list is checked: each one a trainable 2-D parameter of the block, none twice."""
    own = getattr(block, "muon_matrices", None)
    if own is None:
        return [p for p in block.parameters() if p.requires_grad and p.dim() == 2]
    matrices = list(own())
    mine = {id(p) for p in block.parameters()}
    name = type(block).__name__
    for p in matrices:
        if id(p) not in mine or not p.requires_grad or p.dim() != 2:
            raise ValueError(
                f"{name}.muon_matrices() names a tensor of shape {tuple(p.shape)} that is not a trainable 2-D "
                "parameter of the block"
            )
    if len({id(p) for p in matrices}) != len(matrices):
        raise ValueError(f"{name}.muon_matrices() names a parameter twice")
    return matrices


def muon_split(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(Muon's, AdamW's) trainable parameters of a token model, each in exactly one of the two, in the model's
    parameter order: Muon takes every block's hidden matrices (block_matrices); AdamW everything else, the
    token and position embeddings, the output head (tied or not), the final norm, a classifier's pooler and
    head, and every gain, norm weight, bias and scalar of the blocks (Jordan et al. 2024, "Muon: An optimizer
    for hidden layers in neural networks"; Liu et al. 2025, "Muon is Scalable for LLM Training", Sec. 2.2)."""
    hidden = {id(p) for block in model_blocks(model) for p in block_matrices(block)}
    params = [p for p in model.parameters() if p.requires_grad]
    return [p for p in params if id(p) in hidden], [p for p in params if id(p) not in hidden]


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


def gathered(t: torch.Tensor) -> torch.Tensor:
    """The whole of a tensor that FSDP holds in shards (a DTensor), gathered from every process: a
    collective, which each process must call; any other tensor as it is."""
    return t.full_tensor() if isinstance(t, DTensor) else t
