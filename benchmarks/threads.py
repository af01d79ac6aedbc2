"""How many CPU threads a run should use: a training step's time at several thread counts, with the machine to
itself and beside busy processes (one `while True: pass` per core), in fresh processes.

    python benchmarks/threads.py [--busy N] [--threads torch,1,2,auto] [--shapes small,mid,wide] [--repeats 3]

Each cell is a new process that builds a Pre-LN model at the shape, sets its thread count (`auto`:
blocklab's default, `train.threads 0`; `torch`: torch's own default, one per core), and times full training
steps (forward, backward, AdamW) on random tokens: the median step time after 3 warm-up steps. The busy processes
start before the cell and stop after it. Each cell runs `--repeats` times, the thread counts interleaved, and the
table shows the median of its repeats (a shared machine's other work moves single measurements a lot). Shapes (4 Pre-LN layers, T=64, batch 16, vocabulary
1024): `small` is the quick preset's model (d=64: 266k parameters), `mid` d=256 (the widest that auto gives one
thread on any machine), `wide` d=512. "Before" is torch's default (`torch`: a thread per core), "after" is `auto`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (model, timed steps): fewer steps where each costs more.
SHAPES = {
    "small": ({"d_model": 64, "n_layers": 4, "n_heads": 4, "d_ff": 256}, 30),
    "mid": ({"d_model": 256, "n_layers": 4, "n_heads": 4, "d_ff": 1024}, 12),
    "wide": ({"d_model": 512, "n_layers": 4, "n_heads": 8, "d_ff": 2048}, 6),
}

CELL = """
import json, statistics, sys, time
import torch
from blocklab import ModelConfig, build_model

shape, threads, steps = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cfg = ModelConfig(block="pre-ln", vocab_size=1024, max_seq_len=64, **shape)
if threads == "auto":
    from blocklab.training.threads import auto_threads

    torch.set_num_threads(auto_threads(cfg))
elif threads != "torch":
    torch.set_num_threads(int(threads))
torch.manual_seed(0)
model = build_model(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(3, 1024, (16, 64))
times = []
for step in range(steps + 3):
    t0 = time.perf_counter()
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
print(json.dumps({"threads": torch.get_num_threads(), "ms": 1000 * statistics.median(times[3:])}))
"""


def cell(shape: dict, threads: str, steps: int, busy: int) -> dict:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(0.5 if busy else 0.0)  # the busy loops are running before the cell starts
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        done = subprocess.run(
            [sys.executable, "-c", CELL, json.dumps(shape), threads, str(steps)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--busy", type=int, default=len(os.sched_getaffinity(0)), help="busy processes (default: one per core)"
    )
    p.add_argument("--threads", default="torch,1,2,auto", help="thread counts to time: numbers, torch, auto")
    p.add_argument("--shapes", default="small,mid,wide")
    p.add_argument("--repeats", type=int, default=3, help="runs of each cell; the table shows their median")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; cores: {len(os.sched_getaffinity(0))}", flush=True)
    print("| shape | threads | alone (ms/step) | beside busy processes (ms/step) | slowdown |")
    print("|---|---|---:|---:|---:|")
    for name in args.shapes.split(","):
        shape, steps = SHAPES[name]
        counts = args.threads.split(",")
        runs: dict = {(t, busy): [] for t in counts for busy in (0, args.busy)}
        for _ in range(args.repeats):  # interleaved: a slow spell of the machine hits every count alike
            for t in counts:
                for busy in (0, args.busy):
                    runs[t, busy].append(cell(shape, t, steps, busy))
        for t in counts:
            alone = statistics.median(r["ms"] for r in runs[t, 0])
            busy = statistics.median(r["ms"] for r in runs[t, args.busy])
            label = f"{t} ({runs[t, 0][0]['threads']})" if t in ("auto", "torch") else t
            print(f"| {name} | {label} | {alone:.1f} | {busy:.1f} | {busy / alone:.1f}x |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
