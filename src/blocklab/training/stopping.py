"""Why a run stops before its last step: a diverged loss, a signal, a stall (training/stall.py), and what
the log says of each. The checkpoint a message names is one that exists: nothing else is claimed."""

from __future__ import annotations

import contextlib
import math
import signal

import torch

from blocklab import interrupts


def diverged(loss: float, initial_loss: float, factor: float) -> bool:
    """A non-finite loss, or one above `factor` times the run's first loss."""
    return not math.isfinite(loss) or loss > factor * initial_loss


def divergence_message(step: int, loss: float, initial_loss: float, saved_step: int | None) -> str:
    """`saved_step`: the run's last checkpoint (None: it has none), all of whose steps came before."""
    kept = (
        f"the last good checkpoint (step {saved_step}) is kept"
        if saved_step is not None
        else "no checkpoint was written before it (--resume would start from step 0)"
    )
    return f"diverged at step {step}: loss {loss:.4g} (initial {initial_loss:.4g}); {kept}"


def stall_message(step: int, margin: float, entropy: float, patience: int) -> str:
    return (
        f"stalled at step {step}: the loss has stayed within {margin:g} of the "
        f"unigram entropy {entropy:.4g} for {patience} steps; checkpoint kept"
    )


def interrupted(flag: SignalFlag, dist) -> bool:
    """Whether any process got a signal: every process stops at the same step (a collective on each step)."""
    return dist.sum(torch.tensor(float(flag.raised), device=dist.device)).item() > 0


class SignalFlag:
    """Turn the first SIGINT/SIGTERM into a flag the loop checks; a second SIGINT interrupts at once."""

    def __init__(self):
        self.raised = interrupts.take()  # a Ctrl-C swallowed before the loop (blocklab/interrupts.py)
        self._old = {}

    def _handle(self, signum, frame):
        if self.raised and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.raised = True

    def __enter__(self):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
