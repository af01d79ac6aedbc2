"""How many CPU threads a run's torch uses (`train.threads`; 0: auto).

Measured on 2 cores (benchmarks/RESULTS.md, "CPU: threads per run"): beside processes that keep the cores busy,
a step with a thread per core (torch's default) took 6 to 17 times as long as with the cores to itself, whatever
the width: OpenMP's threads wait for each other at every operator, and one of them is always waiting for a core.
One thread slowed down 2 to 3 times, as much as its share of the cores. With the machine to itself, threads gain
1.3x at width 64 and 1.7x at width 512. So auto gives a model of width 256 or less one thread (its small matrices
gain little from more), and a wider one a thread per core but one: the core left over keeps one other busy
process from stalling every operator (on 2 cores: one thread). The count is a function of the model and the
machine, never of the load at the moment (a run's numbers must not depend on what else was running). Set
train.threads to use every core of a machine nothing else uses. OMP_NUM_THREADS, when set (by the user, torchrun,
or a `compare --jobs` worker for its share of the cores), is the auto value.
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
    """train.threads 0: OMP_NUM_THREADS when set, else one thread for a small model, and for a wide one a thread
    per core but one."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return 1 if model.d_model <= SMALL_WIDTH else max(1, cpu_count() - 1)


def run_threads(threads: int, model: ModelConfig) -> int:
    """The thread count of a run with train.threads `threads`."""
    return threads if threads > 0 else auto_threads(model)
