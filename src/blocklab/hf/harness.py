"""lm-eval as `blocklab eval` runs it (hf/evaluation.py): offline, quiet, and each task loaded on its own so that a
failure is one line naming it.

No network: the harness runs with the Hugging Face hub offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE), so
a harness task runs when its data is in the local cache, and otherwise fails with one line naming it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from unittest import mock

from blocklab.errors import UserError
from blocklab.hf.eval_tasks import SHIPPED

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@contextlib.contextmanager
def hub_offline():
    """The Hugging Face hub offline while the harness runs. The environment variables reach the libraries
    imported from here on; huggingface_hub and datasets read them once, at import, so if they were imported
    before (another evaluation, a notebook) their flags are set too, and everything is restored after."""
    saved_env = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update(dict.fromkeys(OFFLINE_ENV, "1"))
    import datasets.config
    import huggingface_hub.constants

    flags = [(huggingface_hub.constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE")]
    flags.append((datasets.config, "HF_DATASETS_OFFLINE"))
    saved = [(mod, attr, getattr(mod, attr)) for mod, attr in flags]
    for mod, attr, _ in saved:
        setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in saved:
            setattr(mod, attr, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Truncations(logging.Filter):
    """Counts, and keeps off the log, HFLM's warning for each request whose context it cuts from the left to
    fit the window: blocklab's code tasks have long contexts by design, and one line per request buried
    everything else. evaluate() says the count once instead."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Combined length of context"):
            self.count += 1
            return False
        return True


def harness_tasks(manager, names: list[str]) -> list[tuple[str, list]]:
    """(name, the harness's Task and Group objects) for each of `names` (a tag: its tasks), loaded one name at a
    time so that a failure (data neither on disk nor downloadable offline, a broken config) is one line naming
    the task."""
    objects = []
    for name in names:
        if name not in manager.all_tasks and not Path(name).is_file():
            raise UserError(
                f"unknown task {name!r}: neither one of blocklab's ({', '.join(SHIPPED)}) nor one lm-eval "
                "knows (lm-eval ls tasks lists them), nor a task config file (.yaml)"
            )
        try:
            loaded = manager.load(name)
        except Exception as e:  # the harness and datasets raise anything from KeyError to ConnectionError
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            hint = "; blocklab eval runs offline: put the task's data in the Hugging Face cache first"
            offline = isinstance(e, (ConnectionError, OSError)) or "offline" in reason.lower()
            raise UserError(f"lm-eval task {name!r} cannot be loaded: {reason}{hint if offline else ''}") from None
        if name in loaded["groups"]:
            objects.append((name, [loaded["groups"][name]]))
        elif name in loaded["tasks"]:
            objects.append((name, [loaded["tasks"][name]]))
        else:  # a tag, or a task config file: the tasks it names
            objects.append((name, list(loaded["groups"].values()) or list(loaded["tasks"].values())))
    return objects


@contextlib.contextmanager
def no_progress_bars():
    """The harness, datasets and transformers without their progress bars (a bar per batch of requests: about
    twenty per task), their tokenizer's long-input warning (the harness cuts long contexts itself; evaluate() says
    how often), and the harness's `git describe` of whatever folder the user stands in (its hash means nothing
    for the run, and outside a repository git prints 'fatal: not a git repository'). evaluate() says one line per
    task instead. Every bar is a tqdm (datasets' and transformers' subclass it), so tqdm's own default is set.
    Nor the harness's environment report after each task (torch's collect_env: about ten processes, pip list and
    nvidia-smi among them, 3 s a task on 2 cores), whose keys the stored record does not keep (eval_store.KEPT)."""
    import lm_eval.evaluator
    import tqdm.std
    from transformers.utils import logging as hf_logging

    original, verbosity = tqdm.std.tqdm.__init__, hf_logging.get_verbosity()

    def silent(self, *args, **kwargs):
        kwargs["disable"] = True
        original(self, *args, **kwargs)

    tqdm.std.tqdm.__init__ = silent
    hf_logging.set_verbosity_error()
    try:
        with (
            mock.patch.object(lm_eval.evaluator, "get_git_commit_hash", lambda: None),
            mock.patch.object(lm_eval.evaluator, "add_env_info", lambda storage: None),
        ):
            yield
    finally:
        tqdm.std.tqdm.__init__ = original
        hf_logging.set_verbosity(verbosity)
