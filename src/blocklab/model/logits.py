"""The attentions of a model that train.qk_clip clips (attention/logits.py), layer by layer, and whether a
config's blocks allow it at all, asked of the blocks themselves before any data is read."""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention.logits import ClipsLogits
from blocklab.blocks import REGISTRY
from blocklab.config import ModelConfig
from blocklab.model.params import model_blocks


def layer_attentions(model: nn.Module) -> list[tuple[str, ClipsLogits]]:
    """(layer, attention) for every attention of the model's blocks, in order: layer `L{l}` for encoder (or
    decoder-only) block l, `D{l}` for a translation model's decoder block l (a decoder block has two)."""
    model = getattr(model, "module", model)
    n = len(getattr(model, "blocks", ()))
    return [
        (f"L{i}" if i < n else f"D{i - n}", m)
        for i, block in enumerate(model_blocks(model))
        for m in block.modules()
        if isinstance(m, ClipsLogits)
    ]


def refusal(attentions: list[tuple[str, ClipsLogits]]) -> str | None:
    """Why QK-clip cannot apply to these attentions (the first one's reason), or None."""
    if not attentions:
        return "its blocks have no attention whose logits QK-clip can scale"
    return next((why for _, m in attentions if (why := m.qk_clip_refusal()) is not None), None)


def qk_clip_refusal(cfg: ModelConfig) -> str | None:
    """Why train.qk_clip cannot apply to the model `cfg` builds, or None: its blocks built on the meta device
    (no memory, no values, a fraction of a second), each attention asked (ClipsLogits.qk_clip_refusal)."""
    spec = REGISTRY[cfg.block]
    with torch.device("meta"):
        blocks = nn.ModuleList(spec.cls(cfg, i) for i in range(cfg.n_layers))
        if cfg.task == "translation":
            decoder = nn.ModuleList(spec.decoder(cfg, i) for i in range(cfg.n_decoder_layers or cfg.n_layers))
            blocks = nn.ModuleList([*blocks, *decoder])
    return refusal([("", m) for m in blocks.modules() if isinstance(m, ClipsLogits)])
