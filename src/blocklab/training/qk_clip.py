"""train.qk_clip: Kimi K2's QK-clip after every optimizer step (attention/logits.py says what it is).

Each attention keeps its heads' largest logits over the step's micro-batches; after the optimizer's step the
maxima of every process are reduced to one (MAX), so that every replica or shard scales the same heads by the
same factors, and each head past tau has its W^Q and W^K rows scaled by sqrt(tau / max) each. The maxima, one
per layer (the largest over its heads and, for a decoder block, over its two attentions), are the step's
measured values, before the clip: the trainer logs them as `max_logit/L{l}` (`D{l}`). Nothing here waits for
the device: the factors are computed where the maxima are, and read only where a row is logged.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.errors import ConfigError
from blocklab.model.logits import layer_attentions, refusal
from blocklab.training.distributed import Dist


class QKClip:
    def __init__(self, model: nn.Module, tau: float, dist: Dist, block: str):
        self.attentions = layer_attentions(model)
        why = refusal(self.attentions)
        if why is not None:
            raise ConfigError(f"train.qk_clip={tau!r} does not apply to block {block!r}: {why}")
        self.tau, self.dist = tau, dist
        self.layers = list(dict.fromkeys(layer for layer, _ in self.attentions))
        index = [self.layers.index(layer) for layer, _ in self.attentions]
        self.index = torch.tensor(index, device=dist.device)
        self.last: torch.Tensor | None = None  # the last step's per-layer maxima, before its clip
        for _, m in self.attentions:
            m.track_logits()

    @torch.no_grad()
    def step(self) -> None:
        """After the optimizer's step: clip every head past tau, keep the per-layer maxima for the log."""
        maxima = self.dist.maximum(torch.stack([m.take_max_logits() for _, m in self.attentions]))  # (A, H)
        factors = torch.where(maxima > self.tau, self.tau / maxima, torch.ones_like(maxima))
        for (_, m), f in zip(self.attentions, factors):
            m.scale_logits(f)
        per = maxima.amax(dim=1)
        self.last = torch.full((len(self.layers),), -torch.inf, device=per.device).scatter_reduce(
            0, self.index.to(per.device), per, "amax"
        )

    def values(self) -> dict[str, float]:
        """{`max_logit/L{l}`: the layer's largest logit on the last step's batch} (a read of the device)."""
        if self.last is None:
            return {}
        return {f"max_logit/{layer}": v for layer, v in zip(self.layers, self.last.tolist())}
