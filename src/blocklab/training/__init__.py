"""Training: run configs, the loop, checkpoints, schedules, DDP and sampling."""

from blocklab.training.config import RunConfig, TrainConfig, load_config
from blocklab.training.trainer import Trainer, train

__all__ = ["RunConfig", "TrainConfig", "load_config", "Trainer", "train"]
