"""What a block asks of the token model around it (model/base.py) beyond its stack of blocks.

Most blocks ask nothing. A block whose paper changes the output head, constrains the weights after
every update or fixes the token embedding's start registers an instance of a `ModelHooks` subclass as
its spec's `model_hooks` (`register(..., model_hooks=...)`), and the token model calls
the hooks without knowing which block it holds:

    add_head      after the output head is built: parameters the logits need (registered on the model)
    head_weight   the matrix the logits and the loss are computed with, from the head's stored one
    after_update  after init_weights and after every optimizer step (the trainer calls it)
    after_init    once, at the end of init_weights: an init that reads the initialised model's activations
                  (Admin's profiling pass)
    token_embedding_init  the token embedding's start when the block's paper fixes it (T-Fixup), whatever
                  the config's `init` says; None: the config's
    enter, leave  the residual stream's state between blocks: `enter` makes it from the embedding output,
                  each block maps it to the next, `leave` gives the (B, T, d) hidden state the final norm
                  (and the probes, after every block) read. The state is that hidden state itself for
                  most blocks; several streams (Hyper-Connections) or every earlier output (DenseFormer,
                  Attention Residuals) for the blocks that widen the stream.

`head_params` names the parameters `add_head` registers: they belong to the language model's head, so
a fine-tuned classifier, which has no such head, leaves them out of the encoder it loads.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.layers import EmbeddingInit
from blocklab.registry import REGISTRY


class ModelHooks:
    """The hooks of a block that asks nothing: no head parameters, the head as stored, nothing after an update.

    `model` is the token model (model/base.py TokenModel): `tok`, the untied `head` if any, and
    `token_matrices()`, the (V, d) matrices whose rows are tokens."""

    head_params: tuple[str, ...] = ()

    def add_head(self, model: nn.Module, cfg) -> None:
        """Register on `model` the parameters named in head_params (called once the head is built)."""

    def head_weight(self, model: nn.Module, w: torch.Tensor) -> torch.Tensor:
        """The (V, d) matrix the logits are computed with, given the head's stored matrix w."""
        return w

    def after_update(self, model: nn.Module) -> None:
        """Called, without gradients, after init_weights and after every optimizer step."""

    def after_init(self, model: nn.Module) -> None:
        """Called once, without gradients, at the end of init_weights (after after_update): the start of the
        parameters that the initialised model's own activations set (Admin's omegas). Loading a checkpoint
        afterwards replaces what it set; nothing calls it again."""

    def token_embedding_init(self, cfg) -> EmbeddingInit | None:
        """The token embedding's start (the std of its entries) that the block's paper fixes, asked once when the
        embedding is built; None: the config's init says it."""
        return None

    def enter(self, model: nn.Module, x: torch.Tensor):
        """The stream's state before the first block, from the (B, T, d) embedding output x."""
        return x

    def leave(self, model: nn.Module, state) -> torch.Tensor:
        """The (B, T, d) hidden state a stream's state stands for (what the final norm reads)."""
        return state


NO_HOOKS = ModelHooks()


def model_hooks(block: str) -> ModelHooks:
    """The hooks the block `block` registered (its spec's `model_hooks`), NO_HOOKS if it registered none."""
    hooks = REGISTRY[block].model_hooks or NO_HOOKS
    if not isinstance(hooks, ModelHooks):
        raise TypeError(f"block {block!r}: model_hooks must be a ModelHooks, got {type(hooks).__name__}")
    return hooks
