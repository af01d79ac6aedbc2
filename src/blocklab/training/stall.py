"""Stalled runs: a training loss that sits at the training split's unigram entropy.

A model that has learned only token frequencies predicts the unigram distribution, whose
cross-entropy on the training split is its unigram entropy H (nats, stored with the prepared
data). Post-LN at a high learning rate without warm-up ends exactly there (Xiong et al.), and
so does SAS-P at He & Hofmann's width with too short a warm-up: the loss stops falling and
the run says `completed`. The detector ends such a run early with `status: stalled`.

Rule: after warm-up, keep the last `stall_patience` per-step training losses; the run is
stalled when the mean of each half of that window is within `stall_margin` of H and the second
half's mean is not below the first's by more than `margin / 2`. Averaging over halves absorbs
the per-batch noise (about +-0.15 nats at batch 16 x 128 tokens); asking both halves to sit at H,
without a clear descent between them, keeps a healthy run that passes through H on its way down,
or leaves the plateau slowly, from being called stalled. The window lives in the trainer's
state, so a resumed run decides as the uninterrupted one would.
"""

from __future__ import annotations

import math


class StallDetector:
    def __init__(
        self, entropy: float | None, warmup_steps: int, margin: float, patience: int, window: list[float] | None = None
    ):
        self.entropy = entropy if entropy is not None and math.isfinite(entropy) else None
        self.warmup_steps, self.margin, self.patience = warmup_steps, margin, patience
        self.window = [] if window is None else window  # shared with the trainer's checkpointed state

    @property
    def enabled(self) -> bool:
        return self.patience > 0 and self.entropy is not None

    def update(self, step: int, loss: float) -> bool:
        """Record the loss of update number `step` (1-based); True when the run has stalled."""
        if not self.enabled or step <= self.warmup_steps:
            return False
        self.window.append(float(loss))
        del self.window[: -self.patience]
        return self.stalled()

    def stalled(self) -> bool:
        """The rule (module docstring) on the losses recorded so far; a resumed run that had stalled asks
        it again, so that different settings (a wider margin, a longer patience) decide anew."""
        if not self.enabled or len(self.window) < self.patience:
            return False
        window = self.window[-self.patience :]
        half = self.patience // 2
        first, second = (sum(h) / len(h) for h in (window[:half] or window, window[half:]))
        at_entropy = abs(first - self.entropy) <= self.margin and abs(second - self.entropy) <= self.margin
        return at_entropy and second > first - self.margin / 2  # still descending: leaving the plateau

    def summary(self, stalled_step: int | None = None) -> dict:
        """Fields for summary.json: the reference line of the report's loss plots, and the stall."""
        out = {"unigram_entropy": self.entropy}
        if stalled_step is not None:
            out.update(stalled_step=stalled_step, stall_margin=self.margin, stall_patience=self.patience)
        return out


def stall_detector(train_cfg, entropy: float | None, state: dict) -> StallDetector:
    """The detector of a run: H is the prepared corpus's unigram entropy (None or nan, where a task's
    data has none: detection is then off), its window kept in `state` for exact resume."""
    return StallDetector(
        entropy,
        train_cfg.warmup_steps,
        train_cfg.stall_margin,
        train_cfg.stall_patience,
        state.setdefault("stall_window", []),
    )
