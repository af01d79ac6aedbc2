"""Peak memory per process: DDP against FSDP (and FSDP with activation checkpointing), side by side.

Each configuration is a short `blocklab train` under `torchrun --nproc_per_node N` (gloo on the CPU,
NCCL on GPUs) of the same model; summary.json's `peak_memory_mb` is the largest peak over the
processes (resident set on the CPU, allocated tensors on a GPU). DDP keeps the whole model, its
gradients and AdamW's two moments in every process (16 bytes per parameter in fp32); FSDP keeps 1/N
of them, plus the blocks it gathers for the moment.

On the CPU the resident set is what glibc's malloc holds, not what the tensors hold: its mmap
threshold grows with the first large free, after which FSDP's freed all-gather buffers (one block's
weights, a few MiB) stay in the heap. The runs therefore fix the threshold (MALLOC_MMAP_THRESHOLD_,
so freed tensors go back to the system) unless --default-malloc. Measured on the 2-core machine at
d=1024, 12 layers, 76M parameters (the command below): DDP 1860, FSDP 1070 MiB per process (0.58x);
with glibc's default, 1885 and 1992 (1.06x).

    python benchmarks/fsdp_memory.py --out runs/fsdp-memory --d-model 1024 --layers 12 --seq-len 32 \
        --batch-size 2 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CONFIGS = {
    "ddp": [],
    "fsdp": ["--train.parallel", "fsdp"],
    "fsdp+ac": ["--train.parallel", "fsdp", "--train.activation_checkpointing", "true"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a folder for the runs (replaced)")
    ap.add_argument("--nproc", type=int, default=2, help="processes per run (default 2)")
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8, help="global batch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc's dynamic mmap threshold alone (the CPU peaks then include freed memory)",
    )
    args = ap.parse_args()
    model = [
        "--model.d_model",
        args.d_model,
        "--model.n_layers",
        args.layers,
        "--model.n_heads",
        args.d_model // 64,
        "--data.vocab_size",
        512,
        "--data.seq_len",
        args.seq_len,
        "--train.batch_size",
        args.batch_size,
        "--train.steps",
        args.steps,
        "--train.log_every",
        1,
        "--train.eval_every",
        10_000,
        "--train.checkpoint_every",
        10_000,
        "--train.device",
        "cpu",
    ]
    rows = {}
    for name, extra in CONFIGS.items():
        out = args.out / name
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={args.nproc}",
            "-m",
            "blocklab",
            "train",
            "--out",
            str(out),
            "--overwrite",
            "--no-progress",
            *map(str, model + extra),
        ]
        print(f"{name}: {' '.join(cmd[2:])}", flush=True)
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        if not args.default_malloc:
            env.setdefault("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        rows[name] = json.loads((out / "summary.json").read_text())
    n = rows["ddp"]["n_params"]
    print(
        f"\n{n / 1e6:.1f}M parameters, {args.nproc} processes; model + gradients + AdamW state in fp32: "
        f"{16 * n / 2**20:.0f} MiB whole, {16 * n / args.nproc / 2**20:.0f} MiB per process when sharded"
    )
    print(f"{'config':<10} {'peak MiB/process':>17} {'vs ddp':>7}")
    for name, s in rows.items():
        print(f"{name:<10} {s['peak_memory_mb']:>17.0f} {s['peak_memory_mb'] / rows['ddp']['peak_memory_mb']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
