"""Muon with AdamW as one optimizer (train.optimizer muon): torch.optim.Muon on the blocks' hidden matrices,
torch.optim.AdamW on every other parameter (model/params.py, muon_split), stepped, checkpointed and resumed
as one `torch.optim.Optimizer`, so that the trainer, gradient scaling, the whole and the sharded (DCP)
checkpoints and `blocklab bench` treat it as they treat AdamW.

Muon (Jordan et al. 2024) replaces a matrix's update by the orthogonalised momentum, five Newton-Schulz
iterations in bf16 (torch's implementation, used as it is). Its learning rate follows Moonshot's RMS
matching (Liu et al. 2025, "Muon is Scalable for LLM Training", Sec. 2.2; torch's
adjust_lr_fn="match_rms_adamw"): an (A, B) matrix steps with lr * 0.2 sqrt(max(A, B)), which gives its update
the RMS of a typical AdamW update, so that one train.lr serves the matrices and the AdamW part alike, as in
Moonlight. Weight decay is decoupled in both parts, W <- W (1 - lr * weight_decay) (torch's Muon decays with
the unadjusted lr, as AdamW does; Moonlight uses one decay for both): the Muon matrices and AdamW's
embeddings and head get train.weight_decay, AdamW's gains, norms, biases and scalars none (param_groups).

Here, below the trainer and the benchmark, so that `blocklab bench --optimizer muon` times the optimizer a
run steps.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.model import muon_split, param_groups

# Moonshot's RMS matching (torch.optim.Muon's adjust_lr_fn): the rate train.lr is for AdamW serves Muon too.
ADJUST_LR = "match_rms_adamw"


class MuonAdamW(torch.optim.Optimizer):
    """torch.optim.Muon over `matrices` and the given `adamw` (any torch optimizer over the other parameters),
    as one optimizer: its param_groups are Muon's group, then AdamW's groups (the same dicts: setting a
    group's "lr" sets it for the optimizer that steps it), its `state` the state of both, and step() steps
    Muon, then AdamW. state_dict() and load_state_dict() are torch's own over the union, so a checkpoint
    numbers the parameters Muon's first, then AdamW's, and holds both optimizers' state."""

    def __init__(self, matrices: list[nn.Parameter], adamw: torch.optim.Optimizer, lr: float, weight_decay: float):
        self.muon = torch.optim.Muon([{"params": matrices}], lr=lr, weight_decay=weight_decay, adjust_lr_fn=ADJUST_LR)
        self.adamw = adamw
        self.n_muon_groups = len(self.muon.param_groups)
        super().__init__([*self.muon.param_groups, *adamw.param_groups], {})
        self._share()

    def _share(self) -> None:
        """Both optimizers step the groups and read and write the state this optimizer holds (after it is
        built, and after load_state_dict replaced both)."""
        k = self.n_muon_groups
        self.muon.__setstate__({"state": self.state, "param_groups": self.param_groups[:k]})
        self.adamw.__setstate__({"state": self.state, "param_groups": self.param_groups[k:]})

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("MuonAdamW.step takes no closure: the loss is computed once, before the step")
        self.muon.step()
        self.adamw.step()

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share()


def muon_adamw(model: nn.Module, lr: float, weight_decay: float, make_adamw) -> MuonAdamW:
    """Muon on the model's hidden matrices and `make_adamw(groups)` (an AdamW over the given param groups)
    on the rest: the embeddings and the head decayed, gains, norms, biases and scalars not."""
    matrices, rest = muon_split(model)
    return MuonAdamW(matrices, make_adamw(param_groups(model, weight_decay, rest)), lr, weight_decay)
