"""The tasks a run can train, by `model.task`: one module each, one entry each in `TASKS`.

Adding a task (e.g. classification): a module here with a `Task` subclass (base.py says what it
owns) and its entry below; the trainer needs no change. The model side (the task's name in
`blocklab.registry.TASKS`, the blocks that offer it, `blocklab.model.build_model` or the task's own
`build_model`) is the model package's.
"""

from __future__ import annotations

from blocklab.errors import UserError
from blocklab.training.config import RunConfig
from blocklab.training.tasks.base import Batches, BatchSource, Task, TaskData
from blocklab.training.tasks.classification import Classification
from blocklab.training.tasks.lm import CausalLM, MaskedLM
from blocklab.training.tasks.translation import Translation

TASKS: dict[str, type[Task]] = {
    "clm": CausalLM,
    "mlm": MaskedLM,
    "translation": Translation,
    "classification": Classification,
}


def get_task(cfg: RunConfig) -> Task:
    """The task of a run, built from its config."""
    try:
        cls = TASKS[cfg.model.task]
    except KeyError:
        raise UserError(
            f"model.task={cfg.model.task!r} has no training task; choose one of: {', '.join(TASKS)}"
        ) from None
    return cls(cfg)


__all__ = ["TASKS", "get_task", "Task", "TaskData", "Batches", "BatchSource"]
