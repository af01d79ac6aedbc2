"""Training: run configs, the loop, checkpoints, schedules, DDP and sampling."""

import importlib

__all__ = ["RunConfig", "TrainConfig", "load_config", "Trainer", "train"]

# Imported on first use: the trainer brings torch, which reading a run config (the command line) does not need.
_LAZY = {
    "RunConfig": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "Trainer": "trainer",
    "train": "trainer",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
