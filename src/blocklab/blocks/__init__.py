"""Block registry. `BLOCKS` lists the user-facing names of SPEC.md sections 2 and 2b; `REGISTRY` maps
every block name (ablations included) to its `BlockSpec`, which every other module reads."""

from blocklab.blocks import classic, deepnorm, ngpt, simplified, successors  # noqa: F401  (registers the blocks)
from blocklab.registry import (
    FAMILIES,
    HIDDEN_NORM_LAWS,
    REGISTRY,
    BlockSpec,
    Predictions,
    block_recipe,
    register,
    unregister,
)

BLOCKS: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if spec.public)

__all__ = [
    "BLOCKS",
    "FAMILIES",
    "HIDDEN_NORM_LAWS",
    "REGISTRY",
    "BlockSpec",
    "Predictions",
    "block_recipe",
    "register",
    "unregister",
]
