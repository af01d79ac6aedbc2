"""Training: run configs, the loop, checkpoints, schedules, DDP and sampling."""

from blocklab.lazy import lazy_exports

__all__ = ["RunConfig", "TrainConfig", "load_config", "Trainer", "train"]

# Imported on first use: the trainer brings torch, which reading a run config (the command line) does not need.
_LAZY = {
    "RunConfig": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "Trainer": "trainer",
    "train": "trainer",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
