"""One full training step of a variant: forward, backward, optimizer step (AdamW over param_groups, or Muon
with AdamW), zero_grad.

`Trainer` holds the model, the optimizer and one fixed random batch, so that timing, FLOP
counting and the memory worker all run exactly the same step.
"""

from __future__ import annotations

import contextlib

import torch

from blocklab.bench.config import Shape, Variant
from blocklab.errors import UserError

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=AUTOCAST[precision])


def make_batch(shape: Shape, device: str, seq_len: int | None = None, seed: int = 0):
    """Random token ids and their labels (aligned with the inputs: labels[t] is the target of logits[t])."""
    T = seq_len or shape.seq_len
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, shape.vocab_size, (shape.batch, T + 1), generator=g)
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def make_adamw(groups: list[dict], impl: str = "fused") -> torch.optim.Optimizer:
    """AdamW(lr=1e-4, weight_decay=0.1 on matrices) as `fused` (one multi-tensor kernel, CPU and CUDA,
    torch >= 2.4), `foreach` (multi-tensor ops) or `loop` (one tensor at a time: PyTorch's default on CPU)."""
    kw = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[impl]
    return torch.optim.AdamW(groups, lr=1e-4, **kw)


class Trainer:
    """Model, optimizer (the variant's) and a batch for one variant; `step()` runs one full training step."""

    def __init__(
        self,
        shape: Shape,
        variant: Variant,
        device: str,
        seq_len: int | None = None,
        optimizer: bool = True,
        seed: int = 0,
        adamw: str = "fused",
    ):
        from blocklab import build_model
        from blocklab.model import count_parameters, param_groups

        torch.manual_seed(seed)
        try:
            cfg = shape.model_config(variant.block, variant.attn_impl, seq_len)
        except ValueError as e:
            raise UserError(str(e)) from None
        self.variant, self.device = variant, device
        self.model = build_model(cfg).to(device).train()
        self.params = count_parameters(self.model)
        self.inputs, self.labels = make_batch(shape, device, seq_len, seed)
        self.optimizer = None
        if optimizer and variant.optimizer == "muon":  # train.optimizer muon, its AdamW part as `adamw` says
            from blocklab.optimizers import muon_adamw

            self.optimizer = muon_adamw(self.model, 1e-4, 0.1, lambda groups: make_adamw(groups, adamw))
        elif optimizer:
            self.optimizer = make_adamw(param_groups(self.model, 0.1), adamw)
        self.scaler = torch.amp.GradScaler(device) if variant.precision == "fp16" else None
        self.forward = torch.compile(self.model) if variant.compile else self.model

    def loss(self) -> torch.Tensor:
        with autocast(self.variant.precision, self.device):
            # As training asks: the loss alone, never the (B, T, V) logits it does not use.
            return self.forward(self.inputs, labels=self.labels, return_logits=False).loss

    def forward_backward(self) -> None:
        loss = self.loss()
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self) -> None:
        self.forward_backward()
        if self.optimizer is not None:
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.model.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Drop the big tensors now (the benchmark builds many models in one process)."""
        self.model = self.forward = self.optimizer = self.inputs = self.labels = None
