"""Does blocklab's `init="xavier"` match Xiong et al.'s code (fairseq)?

fairseq's Transformer (and torch.nn.Transformer) differ from blocklab's former `xavier` init in two
ways: the query/key/value projections are Xavier-uniform at gain 1/sqrt(2) (std sqrt(1/(2d)) for a
d x d matrix instead of sqrt(1/d)), and attention and MLP carry biases (zero at init). This script
trains the xiong-iwslt translation recipe (src/blocklab/experiments/translation_presets.py: gettext
German-English pairs, Adam (0.9, 0.98), inverse-square-root decay, label smoothing 0.1, dropout 0.1,
LayerNorm, sinusoidal positions) at 3+3 layers, d=128, Post-LN, in four variants:

  a  gain1        q/k/v at Xavier gain 1 (blocklab's former choice; everything else as fairseq)
  b  fairseq      q/k/v at gain 1/sqrt(2) (fairseq; blocklab's `init="xavier"` now)
  c  gain1+bias   a with biases in attention and MLP (`model.bias=true`)
  d  fairseq+bias b with biases (fairseq exactly)

plus, on request, `old` (blocklab's former init exactly: Xavier-normal gain 1 on every Linear).
Variants a/c/old are made by setting the q/k/v gain before `init_weights` draws the weights (the
library has no switch for it): every variant consumes the random stream in the same order.

Each run goes through the library API as `blocklab train` does, with OMP/torch threads 1 and
`--jobs` runs at once. It prints the validation loss at every evaluation, the final one and BLEU,
and writes them to OUT/results.json.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/xavier_fairseq.py --steps 1000 --seeds 0 1 --jobs 2

Options: --steps (default 1000), --seeds (default 0), --variants (default a b c d), --jobs (default 2),
--lr (5e-4), --warmup (250), --eval-every (200), --block (post-ln), --out (default
/tmp/xavier_fairseq).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

VARIANTS = {
    "a": ("gain1", False),
    "b": ("fairseq", False),
    "c": ("gain1", True),
    "d": ("fairseq", True),
    "old": ("old", False),
}


def overrides(args, bias: bool, seed: int) -> dict:
    return {
        "data": {"source": "gettext", "src_lang": "de", "tgt_lang": "en", "vocab_size": 8000, "seq_len": 64},
        "model": {
            "task": "translation",
            "block": args.block,
            "d_model": 128,
            "n_layers": 3,
            "n_heads": 4,
            "d_ff": 512,
            "norm": "layernorm",
            "init": "xavier",
            "positions": "sinusoidal",
            "dropout": 0.1,
            "bias": bias,
        },
        "train": {
            "seed": seed,
            "optimizer": "adam",
            "beta1": 0.9,
            "beta2": 0.98,
            "schedule": "inv_sqrt",
            "weight_decay": 0.0,
            "grad_clip": 0.0,
            "label_smoothing": 0.1,
            "steps": args.steps,
            "batch_size": 32,
            "lr": args.lr,
            "warmup_steps": args.warmup,
            "inv_sqrt_scale": 250,
            "log_every": 50,
            "eval_every": args.eval_every,
            "eval_batches": 4,
            "checkpoint_every": 10**9,
            "stall_patience": 10**9,
        },
    }


def patch_init(mode: str) -> None:
    """Make `init_weights` draw q/k/v at gain 1 (`gain1`), or every Linear Xavier-normal gain 1 (`old`)."""
    import dataclasses

    import torch.nn as nn

    import blocklab.model.model as lm
    import blocklab.model.seq2seq as s2s
    from blocklab.layers import InitRule, Linear
    from blocklab.model import base

    original = base.init_weights

    def init(model, cfg):
        for m in model.modules():
            if isinstance(m, Linear) and m.weight_init.rule is InitRule.CONFIG:  # fairseq's q/k/v gain
                m.weight_init = dataclasses.replace(m.weight_init, gain=1.0)
        if mode == "old":
            uniform = nn.init.xavier_uniform_
            nn.init.xavier_uniform_ = lambda w, gain=1.0: nn.init.xavier_normal_(w, gain=gain)
            try:
                original(model, cfg)
            finally:
                nn.init.xavier_uniform_ = uniform
        else:
            original(model, cfg)

    s2s.init_weights = lm.init_weights = init


def run_one(job):
    args, variant, seed = job
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from blocklab.training import load_config, train

    mode, bias = VARIANTS[variant]
    if mode != "fairseq":
        patch_init(mode)  # a fresh process per run (max_tasks_per_child=1): the patch never leaks
    out = Path(args.out) / f"{variant}_seed{seed}"
    summary = train(load_config(None, overrides(args, bias, seed)), out, progress=False)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval_loss"], r.get("bleu")) for r in rows if "eval_loss" in r]
    return {
        "variant": variant,
        "seed": seed,
        "status": summary["status"],
        "evals": evals,
        "final_eval_loss": summary["final_eval_loss"],
        "bleu": evals[-1][2] if evals else None,
        "wall_s": summary["wall_time_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--variants", nargs="+", default=["a", "b", "c", "d"], choices=list(VARIANTS))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=250)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--block", default="post-ln")
    p.add_argument("--out", default="/tmp/xavier_fairseq")
    args = p.parse_args()
    jobs = [(args, v, s) for s in args.seeds for v in args.variants]
    with ProcessPoolExecutor(max_workers=args.jobs, max_tasks_per_child=1) as pool:
        results = []
        for r in pool.map(run_one, jobs):
            results.append(r)
            print(
                f"{r['variant']:>4} seed {r['seed']}: {r['status']}, eval loss "
                + " ".join(f"{s}:{l:.4f}" for s, l, _ in r["evals"])
                + f", BLEU {r['bleu']}, {r['wall_s']:.0f} s",
                flush=True,
            )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\nvariant  " + "  ".join(f"{s:>7}" for s, _, _ in results[0]["evals"]) + "     BLEU")
    for v in args.variants:
        rs = [r for r in results if r["variant"] == v]
        steps = [s for s, _, _ in rs[0]["evals"]]
        means = [statistics.mean(r["evals"][i][1] for r in rs if len(r["evals"]) > i) for i in range(len(steps))]
        bleu = statistics.mean(r["bleu"] for r in rs if r["bleu"] is not None)
        print(f"{v:>7}  " + "  ".join(f"{m:7.4f}" for m in means) + f"  {bleu:7.2f}  (mean of {len(rs)} seed(s))")


if __name__ == "__main__":
    main()
