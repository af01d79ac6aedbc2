"""Where a training step's device time goes: torch.profiler's kernel table for each block.

    python benchmarks/profile_step.py                       # he-codeparrot shape on CUDA, bf16
    python benchmarks/profile_step.py --blocks pre-ln,sas-p:fused --device cpu --shape tiny

Eager, autocast at --precision, AdamW (fused); 3 warm-up steps, the mean of 10 timed steps, then
one profiled step whose kernels are listed by device time (CPU time on a CPU).
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from blocklab import build_model
from blocklab.bench.config import parse_shape


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", default="pre-ln,sas-p,sas-p:fused", help="BLOCK[:ATTN_IMPL],... (default: %(default)s)")
    p.add_argument("--shape", default="he-codeparrot", help="as blocklab bench --shape (default: %(default)s)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--rows", type=int, default=14, help="kernels listed per block (default: %(default)s)")
    args = p.parse_args()
    dev, shape = torch.device(args.device), parse_shape(args.shape)
    ids = torch.randint(0, shape.vocab_size, (shape.batch, shape.seq_len), device=dev)
    for spec in args.blocks.split(","):
        block, _, impl = spec.partition(":")
        model = build_model(shape.model_config(block, impl or "sdpa")).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step(model=model, opt=opt):
            with torch.autocast(dev.type, torch.bfloat16, enabled=args.precision == "bf16"):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize()

        for _ in range(3):
            step()
        sync()
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        sync()
        print(f"== {block} [{impl or 'sdpa'}] {args.precision} eager step {(time.perf_counter() - t0) * 100:.1f} ms")
        acts = [ProfilerActivity.CUDA] if dev.type == "cuda" else [ProfilerActivity.CPU]
        with profile(activities=acts) as prof:
            step()
            sync()
        key = "cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=args.rows, max_name_column_width=70))


if __name__ == "__main__":
    main()
