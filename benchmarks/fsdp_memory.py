"""Peak memory per process and time per step: DDP against FSDP, whose gradient accumulation either
reduce-scatters every micro-batch (fsdp-every) or only the last (fsdp-last; train.fsdp_grad_sync), and
FSDP with activation checkpointing, side by side, with the model's own size.

Each configuration is a short `blocklab train` under `torchrun --nproc_per_node N` (gloo on the CPU,
NCCL on GPUs) of the same model, every one with --grad-accum micro-batches per process and update;
summary.json's `peak_memory_mb` is the largest peak over the processes (resident set on the CPU,
allocated tensors on a GPU; the build included: FSDP builds one block at a time, training/materialise.py),
and the time per step is the global batch's tokens over its steady-state tokens_per_s. DDP keeps the whole
model, its gradients and AdamW's two moments in every process (16 bytes per parameter in fp32); FSDP keeps
1/N of them, plus the blocks it gathers for the moment, and with fsdp-last the whole gradients from the
first micro-batch's backward to the last's (4 bytes per parameter, as DDP).

On the CPU the resident set is what glibc's malloc holds, not what the tensors hold: its mmap
threshold grows with the first large free, after which FSDP's freed all-gather buffers (one block's
weights, a few MiB) stay in the heap. The runs therefore fix the threshold (MALLOC_MMAP_THRESHOLD_,
so freed tensors go back to the system) unless --default-malloc. Measured numbers and the command:
benchmarks/RESULTS.md, "CPU: FSDP's memory and gradient sync".

    python benchmarks/fsdp_memory.py --out runs/fsdp-memory --d-model 512 --layers 8 --seq-len 32 \
        --batch-size 4 --grad-accum 2 --steps 6     # 2.6 minutes on 2 cores; --d-model 1024 --layers 12
                                                    # --steps 8: 76M parameters, 9 minutes
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from blocklab.run_summary import read_summary

FSDP = ["--train.parallel", "fsdp"]
CONFIGS = {
    "ddp": [],
    "fsdp-every": FSDP + ["--train.fsdp_grad_sync", "every"],
    "fsdp-last": FSDP + ["--train.fsdp_grad_sync", "last"],
    "fsdp-every+ac": FSDP + ["--train.fsdp_grad_sync", "every", "--train.activation_checkpointing", "true"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a folder for the runs (replaced)")
    ap.add_argument("--nproc", type=int, default=2, help="processes per run (default 2)")
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8, help="global batch")
    ap.add_argument("--grad-accum", type=int, default=2, help="micro-batches per process and update (default 2)")
    ap.add_argument("--steps", type=int, default=8, help="updates per run (the first few are warm-up)")
    ap.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="default: all")
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
        "--train.grad_accum",
        args.grad_accum,
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
    for name in args.configs:
        extra = CONFIGS[name]
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
        rows[name] = read_summary(out)
    first = rows[args.configs[0]]
    n = first.n_params
    print(
        f"\n{n / 1e6:.1f}M parameters ({4 * n / 2**20:.0f} MiB in fp32), {args.nproc} processes, "
        f"grad_accum {args.grad_accum}; model + gradients + AdamW state in fp32: {16 * n / 2**20:.0f} MiB whole, "
        f"{16 * n / args.nproc / 2**20:.0f} MiB per process when sharded"
    )
    print(f"{'config':<14} {'peak MiB/process':>17} {'vs ' + args.configs[0]:>10} {'s/step':>8}")
    for name, s in rows.items():
        step = args.batch_size * args.seq_len / s.tokens_per_s if s.tokens_per_s else float("nan")
        ratio = s.peak_memory_mb / first.peak_memory_mb
        print(f"{name:<14} {s.peak_memory_mb:>17.0f} {ratio:>10.2f} {step:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
