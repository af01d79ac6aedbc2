"""Block registry. `BLOCKS` lists the user-facing names (docs/blocks.md, ablations aside); `REGISTRY` maps
every block name (ablations included) to its `BlockSpec`, which every other module reads; `model_hooks`
gives what a block asks of the token model around it (blocks/hooks.py)."""

from blocklab.blocks import classic, deepnorm, ngpt, simplified, successors  # noqa: F401  (registers the blocks)

# isort: split
# Section 2c's residual-stream blocks register after those of 2 and 2b.
from blocklab.blocks import depthmix, hyper, laurel, value_residual  # noqa: F401

# isort: split
# Section 2c's last norm placements (HybridNorm, ResiDual) after the residual-stream blocks.
from blocklab.blocks import placements  # noqa: F401

# isort: split
# Section 2c's last rows, the initialisations (Admin, T-Fixup), after the norm placements.
from blocklab.blocks import admin, tfixup  # noqa: F401

# isort: split
# NormFormer and OLMo 2's reordered norm, then Frac-Connections and MUDDFormer.
from blocklab.blocks import norm_positions  # noqa: F401

# isort: split
from blocklab.blocks import frac, mudd  # noqa: F401
from blocklab.blocks.hooks import NO_HOOKS, ModelHooks, model_hooks
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
    "NO_HOOKS",
    "REGISTRY",
    "BlockSpec",
    "ModelHooks",
    "Predictions",
    "block_recipe",
    "model_hooks",
    "register",
    "unregister",
]
