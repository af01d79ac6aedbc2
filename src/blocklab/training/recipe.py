"""A block's paper recipe (REGISTRY[block].recipe: nGPT's no weight decay, no warm-up, ...) filled into a run's
settings where the run sets no value of its own, and the training log's line that says which values it filled."""

from __future__ import annotations

from blocklab.config import ModelConfig
from blocklab.registry import REGISTRY


def apply_recipe(raw: dict) -> tuple[dict, dict]:
    """Fill in the recipe of raw's block (REGISTRY[block].recipe; model.block unset: the default block).

    `raw` is the nested {"model": {...}, "data": {...}, "train": {...}} of the settings a run sets itself; a recipe
    value goes only where raw has no value for its key, so every explicit setting wins
    (docs/sweeps.md#where-a-runs-settings-come-from: package defaults < block recipe < the run's own settings). Returns
    (a new raw, the values applied as {"section.option": value}); raw itself is left as it was. An unknown block applies
    nothing (RunConfig.from_dict then names the valid ones).
    """
    new = {section: dict(values) if isinstance(values, dict) else values for section, values in raw.items()}
    model = new.get("model")
    block = model.get("block", ModelConfig.block) if isinstance(model, dict) else ModelConfig.block
    spec = REGISTRY.get(block) if isinstance(block, str) else None
    applied: dict = {}
    for key, value in spec.recipe if spec is not None else ():
        section, option = key.split(".", 1)
        values = new.setdefault(section, {})
        if isinstance(values, dict) and option not in values:
            values[option] = applied[key] = value
    return new, applied


def describe_recipe(block: str, applied: dict) -> str:
    """One line for the training log: 'recipe of nGPT (Loshchilov et al. 2024, Sec. 2.6): train.weight_decay=0.0'."""
    spec = REGISTRY[block]
    values = ", ".join(f"{k}={v!r}" for k, v in applied.items())
    return f"recipe of {spec.label} ({spec.recipe_source}): {values}"
