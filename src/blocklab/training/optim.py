"""Optimizers (no weight decay on gains, norms, biases; Muon with AdamW: blocklab/optimizers.py) and
learning-rate schedules with warm-up."""

from __future__ import annotations

import math

import torch

from blocklab.model import param_groups
from blocklab.optimizers import muon_adamw
from blocklab.training.config import TrainConfig


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """train.optimizer over the model: AdamW, Adam or SGD over param_groups, or muon (blocklab/optimizers.py):
    torch.optim.Muon on the blocks' hidden matrices and this AdamW on the rest."""
    if cfg.optimizer == "muon":
        return muon_adamw(model, cfg.lr, cfg.weight_decay, lambda groups: _adam(torch.optim.AdamW, groups, cfg))
    groups = param_groups(model, cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    return _adam(torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam, groups, cfg)


def _adam(cls, groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    try:
        # The fused kernel updates all tensors at once: 2-9x faster optimizer steps on CPU
        # than the default per-tensor loop (benchmarks/RESULTS.md).
        return cls(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=True)
    except (RuntimeError, ValueError):  # devices or dtypes without a fused kernel
        return cls(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr for update number `step` (0-based): linear warm-up over warmup_steps, then

    constant: 1; linear: linear decay to 0 at `steps`; cosine: half cosine to 0;
    inv_sqrt: min(1, sqrt(s / t)) with s = `inv_sqrt_scale` (fairseq's inverse_sqrt, used by Xiong et al.,
    is s = warmup_steps). Without warm-up the rate starts at lr_max, as in Xiong et al.'s "no warm-up"
    runs, and is held until t = s (default 5% of steps) before decaying like the warm-up runs: the
    fairseq formula would instead decay as 1/sqrt(t) from the first step, which starves every block
    alike, Pre-LN included. A sweep comparing warm-ups sets one s for all its runs, so they differ in
    their warm-up only.
    """
    w, n, t = cfg.warmup_steps, cfg.steps, step + 1
    if t <= w:
        return t / w
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "inv_sqrt":
        return min(1.0, math.sqrt(inv_sqrt_scale(cfg) / t))
    progress = (step - w) / max(n - w, 1)  # 0 right after warm-up, (n-w-1)/(n-w) at the last update
    if cfg.schedule == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def inv_sqrt_scale(cfg: TrainConfig) -> int:
    """The step after which inv_sqrt decays: inv_sqrt_scale, else warmup_steps, else 5% of steps (at least 1)."""
    if cfg.inv_sqrt_scale is not None:
        return max(cfg.inv_sqrt_scale, 1)
    return max(cfg.warmup_steps or int(round(0.05 * cfg.steps)), 1)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
