"""How many runs `blocklab compare` should train at once on this machine: the same runs, one after another
with every thread, against N at a time with their share of the threads, side by side in one process.

    python benchmarks/compare_jobs.py --out DIR [--runs 4] [--jobs 2]

Two shapes: the `quick` preset's runs (d=64, 4 layers, T=64, vocabulary 1024, 150 steps) and wide ones
(d=512, 4 layers, 30 steps), each trained `--runs` times (seeds 0..runs-1). Prints the wall-clock of each
way and the speed-up; the default of `compare --jobs` (experiments/jobs.py) is the rule these numbers
support. Each way pays its own start-up (the parallel way spawns its worker processes), as compare does.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

# (model, steps): the small runs as long as quick's, the wide ones shorter (each step costs 40x more).
SHAPES = {
    "small (quick: d=64, 4 layers, T=64, 150 steps)": ({"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": 256}, 150),
    "wide (d=512, 4 layers, T=64, 30 steps)": ({"d_model": 512, "n_layers": 4, "n_heads": 8, "d_ff": 2048}, 30),
}


def sweep(model: dict, runs: int, steps: int):
    from blocklab.experiments import build_sweep

    return build_sweep(
        {
            "name": "jobs",
            "seeds": list(range(runs)),
            "base": {
                "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 64},
                "model": model,
                "train": {
                    "steps": steps,
                    "batch_size": 16,
                    "lr": 3e-3,
                    "eval_every": steps,
                    "eval_batches": 4,
                    "checkpoint_every": 10 * steps,
                    "stall_patience": 0,
                },
            },
            "runs": [{"name": "pre-ln", "model.block": "pre-ln"}],
        }
    )


def timed(model: dict, runs: int, steps: int, jobs: int, out: Path) -> float:
    from blocklab.experiments import run_sweep

    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    run_sweep(sweep(model, runs, steps), out, progress=False, log=lambda *a: None, jobs=jobs)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="scratch folder (emptied)")
    p.add_argument("--runs", type=int, default=4, help="runs of each shape (default 4)")
    p.add_argument("--jobs", type=int, default=2, help="runs at once in the parallel way (default 2)")
    p.add_argument("--only", choices=["small", "wide"], help="one of the two shapes")
    args = p.parse_args()
    import torch

    from blocklab.experiments.jobs import cpu_count

    print(f"{cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads")
    print(f"| shape | {args.runs} runs one at a time (s) | {args.jobs} at a time (s) | speed-up |")
    print("|---|---|---|---|")
    for name, (model, steps) in SHAPES.items():
        if args.only and not name.startswith(args.only):
            continue
        timed(model, 1, 2, 1, Path(args.out) / "warm")  # the data cache and the imports, outside the timing
        one = timed(model, args.runs, steps, 1, Path(args.out) / "one")
        many = timed(model, args.runs, steps, args.jobs, Path(args.out) / "many")
        print(f"| {name} | {one:.1f} | {many:.1f} | {one / many:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
