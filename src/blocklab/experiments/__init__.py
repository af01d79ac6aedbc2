"""Experiments: sweeps over blocks, learning rates, warm-ups and seeds, and the built-in presets."""

from blocklab.lazy import lazy_exports

__all__ = ["PRESETS", "RunSpec", "Sweep", "build_sweep", "load_sweep", "run_probes", "run_sweep", "start_probes"]

# Imported on first use: the runner brings torch, which listing the presets (the command line) does not need.
_LAZY = {
    "PRESETS": "presets",
    "run_probes": "probe_job",
    "run_sweep": "runner",
    "start_probes": "probe_job",
    "RunSpec": "sweep",
    "Sweep": "sweep",
    "build_sweep": "sweep",
    "load_sweep": "sweep",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
