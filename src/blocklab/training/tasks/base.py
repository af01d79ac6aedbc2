"""The task seam: what the trainer asks of a task, and nothing more (in the spirit of torchtitan's
`TrainSpec`).

A task owns its data (preparing the corpus, the training and validation batches), its model, the
loss terms of a batch and their count, what it adds at evaluation steps (BLEU for translation) and to summary.json.
The trainer (training/trainer.py) owns the loop: optimiser, schedule, precision, DDP, checkpoints,
logging, divergence and stall detection, and it never tests a task's name: it looks the task up in
the registry (training/tasks/__init__.py) by `model.task` and calls the methods below.

Random-number discipline (the golden runs pin it): the trainer calls `prepare`, then `batches`,
then seeds torch with `train.seed` and calls `build_model`; batches are pure functions of
(seed, step), so a task must not draw from torch's global generator outside `build_model`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn as nn

from blocklab.model import build_model
from blocklab.training.config import RunConfig

Log = Callable[..., None]
Autocast = Callable[[], AbstractContextManager]  # a fresh autocast context for each forward pass


class TaskData(Protocol):
    """A prepared corpus, as the trainer uses it."""

    tokenizer: Any  # saved as tokenizer.json in the run directory
    vocab_size: int  # checked against model.vocab_size
    unigram_entropy: float | None  # the stall detector's reference (training/stall.py); None turns it off


class BatchSource(Protocol):
    """One split's batches: a pure function of (seed, step), identical on every rank."""

    tokens_per_step: int  # tokens of one global training batch (throughput, summary `tokens`)

    def get(self, step: int, rank: int = 0, world_size: int = 1) -> Any:
        """This rank's share of the global batch of `step`."""

    def val_batches(self, max_batches: int | None = None) -> Iterator[Any]:
        """The evaluation batches: the same ones on every call."""


@dataclass(frozen=True)
class Batches:
    train: BatchSource
    val: BatchSource


class Task:
    """Base class of every task; a subclass is one module under training/tasks/ and one registry entry.

    Built from the run's config (`Task(cfg)`). Methods with a default here may be left alone.
    """

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    # --- data ---------------------------------------------------------------------------------
    def prepare(self, log: Log) -> TaskData:
        """Prepare (or load from the cache) the run's corpus."""
        raise NotImplementedError

    def batches(self, data: TaskData, log: Log) -> Batches:
        """The training and validation batches of the prepared corpus."""
        raise NotImplementedError

    # --- model --------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The freshly initialised model (torch's generator is seeded just before)."""
        return build_model(self.cfg.model)

    def compile(self, model: nn.Module) -> None:
        """Regional compilation: each block once (they share code, so one compile serves all of
        them); the embeddings and the chunked loss stay eager. Seconds, not a minute, at 18 layers."""
        for block in model.blocks:
            block.compile()

    def attention_layers(self, model: nn.Module) -> int:
        """Attention products per token position (the 12 L T d term of the model FLOPs)."""
        return model.cfg.n_layers

    # --- loss and evaluation ------------------------------------------------------------------
    def loss(
        self, model: nn.Module, batch: Any, device: torch.device, autocast: Autocast
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed token loss, number of loss tokens) of this rank's batch: the trainer divides by
        the global count, so DDP's gradient average equals the gradient of the global-batch mean.
        `model` may be the DDP wrapper (training) or the bare model in eval mode (evaluation)."""
        raise NotImplementedError

    def loss_count(self, batch: Any) -> torch.Tensor:
        """The number of loss terms of a batch (the count `loss` returns), without a forward pass: the
        trainer needs the global count before the first micro-batch's backward."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, data: TaskData, val: BatchSource, device: torch.device, state: dict) -> dict:
        """Metrics added to the metrics row of an evaluation step (after the eval loss), recording
        what the summary needs in `state` (checkpointed, so a resumed run continues it)."""
        return {}

    def initial_state(self) -> dict:
        """The task's fields of the run state, before the first step."""
        return {}

    def summary_fields(self, state: dict) -> dict:
        """The task's fields of summary.json."""
        return {}
