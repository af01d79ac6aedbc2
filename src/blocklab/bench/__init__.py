"""`blocklab bench`: training-step throughput, MFU against a measured matmul peak, peak memory, memory scaling.

Modules: `config` (shape, variants, validation), `peak` (matmul peak), `flops` (FlopCounterMode),
`step` (one training step), `timing` (interleaved timing), `memory` + `worker` (peak memory in
fresh processes, memory scaling), `runner` (`run_bench`), `report` (tables, JSON).
"""

from blocklab.bench.config import SHAPES, BenchConfig, Shape, Variant, parse_shape
from blocklab.bench.report import render_text, write_json
from blocklab.bench.runner import run_bench

__all__ = ["SHAPES", "BenchConfig", "Shape", "Variant", "parse_shape", "render_text", "run_bench", "write_json"]
