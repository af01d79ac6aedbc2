"""`blocklab bench`: training-step throughput, MFU against a measured matmul peak, peak memory, memory scaling.

Modules: `config` (shape, variants, validation), `peak` (matmul peak), `flops` (FlopCounterMode),
`step` (one training step), `timing` (interleaved timing), `memory` + `worker` (peak memory in
fresh processes, memory scaling), `runner` (`run_bench`), `report` (tables, JSON).
"""

from blocklab.lazy import lazy_exports

__all__ = ["SHAPES", "BenchConfig", "Shape", "Variant", "parse_shape", "render_text", "run_bench", "write_json"]

# Imported on first use: the runner brings torch, which `blocklab bench --help` (built from config's
# declarations) does not need.
_LAZY = {
    "SHAPES": "config",
    "BenchConfig": "config",
    "Shape": "config",
    "Variant": "config",
    "parse_shape": "config",
    "render_text": "report",
    "write_json": "report",
    "run_bench": "runner",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
