"""The size of each embedded code task: examples per split and label
balance, for a model pre-trained on `stdlib` and on `python`, and how many fit a tokenizer's length.

    python benchmarks/code_task_sizes.py [--tokenizer RUN/tokenizer.json --max-len 128] [--pool-mb 8]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from blocklab.data import DataConfig
from blocklab.data.codetasks import CODE_TASKS
from blocklab.data.downstream import load_labelled
from blocklab.data.labelled_batches import encode_examples
from blocklab.data.tokenizer import load_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pretrain", default="stdlib,python", help="pre-training corpora, comma-separated")
    ap.add_argument("--pool-mb", type=float, default=8.0)
    ap.add_argument("--tokenizer", help="a run's tokenizer.json: also count the examples that fit --max-len")
    ap.add_argument("--max-len", type=int, default=128)
    args = ap.parse_args()
    tok = load_tokenizer(args.tokenizer) if args.tokenizer else None
    print(
        "| pre-trained on | task | train | val | labels (train) | fit in "
        f"{args.max_len} tokens (train / val) | build s |"
    )
    print("|---|---|---|---|---|---|---|")
    for source in args.pretrain.split(","):
        pretrain = DataConfig(source=source)
        for task in CODE_TASKS:
            t0 = time.perf_counter()
            data = load_labelled(DataConfig(source=task, task_pool_mb=args.pool_mb), pretrain, log=lambda *a: None)
            dt = time.perf_counter() - t0
            counts = Counter(e.label for e in data.train)
            top = ", ".join(f"{data.label_names[k]} {v / len(data.train):.0%}" for k, v in counts.most_common(3))
            fit = "-"
            if tok is not None:
                n = [
                    len(encode_examples(tok, split, args.max_len, False, drop_long=True).ids)
                    for split in (data.train, data.val)
                ]
                fit = f"{n[0]:,} / {n[1]:,}"
            print(f"| {source} | {task} | {len(data.train):,} | {len(data.val):,} | {top} | {fit} | {dt:.1f} |")


if __name__ == "__main__":
    main()
