"""Experiments: sweeps over blocks, learning rates, warm-ups and seeds, and the built-in presets."""

from blocklab.experiments.presets import PRESETS
from blocklab.experiments.runner import run_probes, run_sweep
from blocklab.experiments.sweep import RunSpec, Sweep, build_sweep, load_sweep

__all__ = ["PRESETS", "RunSpec", "Sweep", "build_sweep", "load_sweep", "run_probes", "run_sweep"]
