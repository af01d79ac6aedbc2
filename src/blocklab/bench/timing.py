"""Interleaved (round-robin) timing of training steps, and the statistics reported for them.

All variants live in memory at once. After `warmup` untimed steps each (compilation,
allocator and thread-pool warm-up), every round times `steps` consecutive steps of every
variant; the order rotates each round so no variant always follows the same neighbour. Slow
drifts of a shared machine (another process, thermal state) then hit every variant alike.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

from blocklab.bench.machine import synchronize


def summarize(times: list[float]) -> dict:
    """Median, quartiles (IQR), min and max of step times in seconds."""
    ts = sorted(times)
    if len(ts) >= 2:
        q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive")
    else:
        q1 = q3 = ts[0]
    return {
        "median_s": statistics.median(ts),
        "q1_s": q1,
        "q3_s": q3,
        "iqr_s": q3 - q1,
        "min_s": ts[0],
        "max_s": ts[-1],
        "n": len(ts),
        "times_s": list(times),
    }


def rotate(items: list, r: int) -> list:
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


def time_step(step: Callable[[], None], device: str) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - t0


def interleaved(
    steps: dict[str, Callable[[], None]],
    device: str,
    reps: int,
    warmup: int,
    steps_per_rep: int = 1,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, list[float]]:
    """Per-step times (seconds) of every named step function, measured round-robin."""
    names = list(steps)
    for name in names:
        for i in range(warmup):
            dt = time_step(steps[name], device)
            progress(f"warm-up {name}: step {i + 1}/{warmup} {dt:.3f}s")
    times: dict[str, list[float]] = {n: [] for n in names}
    gc_was_enabled = gc.isenabled()
    try:
        for r in range(reps):
            for name in rotate(names, r):
                gc.collect()
                gc.disable()  # no collector pause inside a timed step
                for _ in range(steps_per_rep):
                    times[name].append(time_step(steps[name], device))
                gc.enable()
            progress(f"round {r + 1}/{reps}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names))
    finally:
        if gc_was_enabled:
            gc.enable()
    return times
