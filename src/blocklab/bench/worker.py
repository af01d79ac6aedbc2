"""Peak-memory worker: one configuration per fresh process (`python -m blocklab.bench.worker JOB_JSON`).

A fresh process is the fair way to measure peak memory on CPU: PyTorch's CPU allocator
keeps no statistics, and tracemalloc / the profiler see only part of what a step holds
(oneDNN scratch space, the allocator's own caching). So each configuration runs alone:

1. import torch, run one step of a *tiny* model of the same block and precision (this
   maps the kernels and starts the thread pools), free it, and read the baseline:
   resident memory (CPU) or `torch.cuda.memory_allocated` (CUDA);
2. build the real model (and AdamW), run `warmup` steps (AdamW's state appears on the
   first step; `torch.compile` compiles there), hand freed heap pages back to the OS
   (`malloc_trim`) and reset the high-water mark (`/proc/self/clear_refs`, Linux);
3. run `measure` steps and report high-water minus baseline: VmHWM / ru_maxrss on CPU,
   `torch.cuda.max_memory_allocated` on CUDA.

The parent starts the worker with glibc's `MALLOC_MMAP_THRESHOLD_` fixed at 128 KiB: every large
tensor then gets its own mapping, handed back to the OS when freed, so the resident set follows
the live tensors (without it, glibc's moving threshold leaves freed tensors in the heap and the
same configuration reads 100 MiB apart from run to run).

The figure is what the training step adds to a process: parameters, gradients, optimizer
state, activations and the allocator's slack (with torch.compile, also what the compiler keeps:
compiled code and guards). The last line on stdout is the JSON result.
"""

from __future__ import annotations

import json
import sys

CPU_METHOD = (
    "peak RSS of a fresh process (VmHWM / ru_maxrss) minus its RSS after a tiny warm-up model; "
    "high-water reset after the warm-up steps; glibc MALLOC_MMAP_THRESHOLD_=128KiB so that freed "
    "tensors leave the resident set"
)
CUDA_METHOD = "torch.cuda.max_memory_allocated minus memory_allocated before building the model (fresh process)"


def measure(job: dict) -> dict:
    import torch

    from blocklab.bench.config import Shape, Variant
    from blocklab.bench.machine import current_rss, peak_rss, release_freed_memory, reset_peak_rss
    from blocklab.bench.step import Trainer

    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    device = job["device"]
    shape = Shape(**job["shape"])
    variant = Variant(**job["variant"])
    optimizer = job.get("optimizer", True)

    tiny = Shape(
        d_model=shape.n_heads * 4, n_heads=shape.n_heads, d_ff=16, seq_len=8, n_layers=1, vocab_size=32, batch=1
    )
    warm = Trainer(
        tiny,
        Variant(variant.block, variant.precision, False, variant.attn_impl, variant.optimizer),
        device,
        optimizer=optimizer,
        adamw=job.get("adamw", "fused"),
    )
    warm.step()
    warm.close()
    del warm
    release_freed_memory()
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    base_rss = current_rss()

    trainer = Trainer(
        shape, variant, device, seq_len=job.get("seq_len"), optimizer=optimizer, adamw=job.get("adamw", "fused")
    )
    for _ in range(job.get("warmup", 1)):
        trainer.step()
    release_freed_memory()
    reset = reset_peak_rss()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(max(1, job.get("measure", 1))):
        trainer.step()
    out = {"params": trainer.params, "rss_peak_bytes": peak_rss() - base_rss, "hwm_reset": reset}
    if device == "cuda":
        torch.cuda.synchronize()
        out.update(peak_bytes=torch.cuda.max_memory_allocated() - base, method=CUDA_METHOD)
    else:
        out.update(peak_bytes=out["rss_peak_bytes"], method=CPU_METHOD)
    return out


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    try:
        result = measure(job)
    except Exception as e:  # reported to the parent as data, never a traceback
        oom = "out of memory" in str(e).lower() or isinstance(e, MemoryError)
        result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "oom": oom}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
