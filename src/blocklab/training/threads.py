"""How many CPU threads a run's torch uses (`train.threads`; 0: auto).

Measured on 2 cores (benchmarks/RESULTS.md, "CPU: threads per run"): a model of width 256 or less keeps one
thread nearly as busy as two with the machine to itself, while two threads beside other busy processes
collapse: OpenMP's threads wait for each other at every operator, and one of them is always waiting for a core.
A wider model's matrices keep every core busy, and its threads lose less than they gain even on a busy machine.
So auto gives a small model one thread and a wide one a thread per core. OMP_NUM_THREADS, when set (by the
user, torchrun, or a `compare --jobs` worker for its share of the cores), is the auto value.
"""

from __future__ import annotations

import os

from blocklab.config import ModelConfig

# The width up to which one thread is the default (and compare --jobs trains single-threaded runs side by side).
SMALL_WIDTH = 256


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_threads(model: ModelConfig) -> int:
    """train.threads 0: OMP_NUM_THREADS when set, else one thread for a small model, one per core for a wide one."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return 1 if model.d_model <= SMALL_WIDTH else cpu_count()


def run_threads(threads: int, model: ModelConfig) -> int:
    """The thread count of a run with train.threads `threads`."""
    return threads if threads > 0 else auto_threads(model)
