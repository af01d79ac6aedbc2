"""The block registry: name -> block class and the block's defaults. The only place blocks are listed."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockSpec:
    cls: type
    beta_ff: float | None = None  # default beta_FF; None: the block has no beta_FF
    beta_sa: float | None = None  # default beta_SA; None: the block has no beta_SA
    final_norm: bool = True       # a Norm after the last block
    public: bool = True           # False: an ablation for the probes, not a block of SPEC section 2


REGISTRY: dict[str, BlockSpec] = {}


def register(name: str, **spec):
    def wrap(cls):
        REGISTRY[name] = BlockSpec(cls, **spec)
        cls.name = name
        return cls

    return wrap
