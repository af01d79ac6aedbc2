"""The training step never waits for the device between its reads (SPEC 6's checks read an on-device buffer
of losses at the logging, evaluation and checkpoint steps). On the CPU a wait is a call that brings a tensor's
value to Python: `.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()`, `float()`, `int()`; counted here when
blocklab's own code makes it (torch's optimizers read their CPU step counters, which is no device sync)."""

import sys
from pathlib import Path

import pytest
import torch

import blocklab
from blocklab.training.config import load_config
from blocklab.training.trainer import Trainer, train

pytestmark = pytest.mark.slow
SRC = str(Path(blocklab.__file__).parent)
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@pytest.fixture
def counted(monkeypatch):
    calls = []
    for name in READS:
        real = getattr(torch.Tensor, name)

        def wrapper(self, *args, _real=real, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(SRC):
                calls.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return calls


@pytest.mark.parametrize(
    "task,train_kw", [("clm", {}), ("mlm", {}), ("clm", {"optimizer": "muon", "qk_clip": 0.01})], ids=str
)
def test_no_host_sync_between_reads(task, train_kw, tmp_path, overrides, counted, monkeypatch):
    overrides["model"]["task"] = task
    overrides["train"].update(train_kw)  # Muon's step and QK-clip's maxima and scaling stay on the device too
    overrides["train"].update(steps=12, log_every=5, eval_every=100, checkpoint_every=100, grad_clip=1.0)
    per_step = []
    real = Trainer._timed_step

    def timed(self, step, read):
        before = len(counted)
        out = real(self, step, read)
        per_step.append((step + 1, read, counted[before:]))
        return out

    monkeypatch.setattr(Trainer, "_timed_step", timed)
    s = train(load_config(None, overrides), tmp_path / "r", progress=False)
    assert s.status == "completed"
    reads = [done for done, read, _ in per_step if read]
    assert reads == [1, 5, 10, 12]  # step 1 (its gradient norms), the logged steps, the last
    quiet = {done: calls for done, read, calls in per_step if not read and done > 1}
    assert len(quiet) == 8 and all(calls == [] for calls in quiet.values()), quiet
    assert all(calls for done, read, calls in per_step if read)  # the reads do read: the counter sees them


def test_divergence_read_later_still_names_its_exact_step(tmp_path, overrides, monkeypatch):
    overrides["train"].update(steps=20, log_every=10, eval_every=100, checkpoint_every=5)
    real = Trainer.train_step

    def blows_up_at_7(self, step):
        loss = real(self, step)
        return loss * float("inf") if step + 1 == 7 else loss

    monkeypatch.setattr(Trainer, "train_step", blows_up_at_7)
    said = []
    s = train(load_config(None, overrides), tmp_path / "r", progress=False, log=said.append)
    assert s.status == "diverged" and s.diverged_step == 7 and s.step == 6
    assert "the last good checkpoint (step 5) is kept" in said[-1]
