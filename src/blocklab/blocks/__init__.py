"""Block registry. `BLOCKS` lists the user-facing names of SPEC.md section 2."""
from blocklab.blocks import classic, simplified  # noqa: F401  (registers the blocks)
from blocklab.blocks.registry import REGISTRY, BlockSpec, register

BLOCKS: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if spec.public)

__all__ = ["BLOCKS", "REGISTRY", "BlockSpec", "register"]
