"""Where a run's numbers go: metrics.jsonl, the trackers of train.trackers (TensorBoard by default;
training/trackers.py), and progress on stderr (a bar on a terminal, plain periodic lines otherwise)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from blocklab.probes.gains import gain_values
from blocklab.training.trackers import Trackers


def truncate_metrics(path: Path, last_step: int) -> None:
    """Drop rows logged after the checkpoint we resume from: they will be logged again."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= last_step:
                keep.append(line)
        except (ValueError, KeyError):
            continue  # a half-written last line from a kill
    path.write_text("".join(k + "\n" for k in keep))


def grad_values(norms: dict[str, float]) -> dict[str, float]:
    """Per-layer gradient norms (probes/grads.py) as metrics keys `grad/L{l}.{role}`, `grad/D{l}.{role}`."""
    return {f"grad/{k}": v for k, v in norms.items()}


class MetricsLogger:
    def __init__(
        self,
        out: Path,
        start: int,
        total: int,
        train_seconds: float,
        enabled: bool = True,
        progress: bool | None = None,
        trackers: Trackers | None = None,
    ):
        self.enabled = enabled
        self.trackers = trackers
        self.last_train_seconds = train_seconds  # tokens/s covers training compute only, not eval or checkpoints
        if not enabled:
            return
        truncate_metrics(out / "metrics.jsonl", start)
        self.file = open(out / "metrics.jsonl", "a")
        self.bar = progress_bar(total, start, progress)

    def train_row(self, step: int, loss: float, lr: float, state: dict, tokens: int, model) -> dict:
        seconds = max(state["train_seconds"] - self.last_train_seconds, 1e-9)
        self.last_train_seconds = state["train_seconds"]
        row = {
            "step": step,
            "loss": loss,
            "lr": lr,
            "tokens_per_s": tokens / seconds,
            "tokens": state["tokens"],
            "elapsed_s": state["wall_seconds"],
        }
        row.update({f"gain/{k}": v for k, v in gain_values(model).items()})
        if self.enabled:
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}", refresh=False)
        return row

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.trackers is not None:
            self.trackers.log(row)

    def advance(self) -> None:
        if self.enabled:
            self.bar.update(1)

    def close(self, summary: dict | None = None, files: list[Path] = ()) -> None:
        """Close the file and the bar; the trackers get the run's summary (None: the run failed) and `files`."""
        if self.enabled:
            self.bar.close()
            self.file.close()
        if self.trackers is not None:
            self.trackers.finish(summary, files)


def progress_bar(total: int, start: int, progress: bool | None):
    """The run's progress on stderr: a tqdm bar on a terminal; elsewhere (a log file, CI, a notebook) plain
    lines, since a bar's carriage returns make one unreadable line there; with progress False, nothing."""
    if progress is None and not sys.stderr.isatty():
        return PlainProgress(total, start)
    return tqdm(
        total=total,
        initial=start,
        disable=not progress and progress is not None,
        unit="step",
        dynamic_ncols=True,
        file=sys.stderr,
    )


class PlainProgress:
    """The progress bar's interface as one plain stderr line every `interval` seconds (and at the first and
    the last step): 'step 40/200 (20%) loss=4.123 lr=3.00e-04 tok_s=1234 12s'."""

    def __init__(self, total: int, start: int, interval: float = 30.0, file=None):
        self.total, self.n, self.interval = total, start, interval
        self.file = file if file is not None else sys.stderr
        self.postfix: dict = {}
        self.t0 = time.monotonic()
        self.last: float | None = None

    def set_postfix(self, refresh: bool = True, **values) -> None:
        self.postfix = values

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.last is None or now - self.last >= self.interval or self.n >= self.total:
            self.last = now
            self._line(now)

    def _line(self, now: float) -> None:
        values = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        pct = 100 * self.n / max(self.total, 1)
        print(f"step {self.n}/{self.total} ({pct:.0f}%) {values} {now - self.t0:.0f}s", file=self.file, flush=True)

    def close(self) -> None:
        pass
