"""Activation checkpointing of a model's blocks: training's `train.activation_checkpointing` and the `transformers`
models' `gradient_checkpointing_enable()` (blocklab.hf) both turn it on here."""

from __future__ import annotations

import functools

import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def all_blocks(model: nn.Module) -> list[nn.Module]:
    """The encoder (or decoder-only) blocks, then a translation model's decoder blocks."""
    return [*model.blocks, *getattr(model, "decoder_blocks", ())]


def checkpoint_activations(model: nn.Module, enable: bool = True, checkpoint_fn=None, every: int = 1) -> None:
    """Each block (every `every`-th) keeps only its input for the backward pass and recomputes the rest there;
    `enable=False` gives every block its own forward back. `checkpoint_fn(forward, *args)`: by default
    non-reentrant `torch.utils.checkpoint`, which replays the forward's random state, so dropout masks and
    losses are unchanged. The block's own forward is wrapped in place rather than the block in a wrapper module:
    parameter names, state dicts and checkpoints stay as they are."""
    fn = checkpoint_fn or functools.partial(checkpoint, use_reentrant=False)
    for i, block in enumerate(all_blocks(model)):
        block.__dict__.pop("forward", None)  # the class's forward again
        if enable and i % every == 0:
            block.forward = functools.partial(fn, block.forward)
