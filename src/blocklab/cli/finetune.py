"""blocklab finetune --run MLM_RUN --task NAME --out DIR [--seeds 0,1,2]: the arguments; the fine-tuning
is blocklab.training.finetune's."""

from __future__ import annotations

import argparse

TASKS_HELP = """\
tasks (--task):
  exception-type      which exception class an `except` clause names (masked as __HOLE__)
  variable-misuse     is one use of a local variable replaced by another local variable
  wrong-operator      is one binary operator replaced by another of its kind
  swapped-operand     are the operands of one non-commutative binary operator swapped
  docstring-mismatch  does this docstring belong to this function (text pair)
  (CuBERT's five tasks, built from Python files of this environment that the mlm run never
  trained on; cached after the first build)
  hf:NAME --data.hf_config CONFIG    GLUE-layout data through `datasets` (e.g. hf:nyu-mll/glue, mrpc)
  PATH.tsv | PATH.jsonl | FOLDER     columns sentence or sentence1/sentence2, and label
"""


def add_parser(sub) -> None:
    from blocklab.training.finetune_recipe import EPOCHS, FINETUNE_TRAIN, WARMUP

    recipe = ", ".join(f"{k} {v}" for k, v in FINETUNE_TRAIN.items())
    p = sub.add_parser(
        "finetune",
        help="fine-tune the encoder of an mlm run on a classification task",
        description="Load the encoder of an mlm run (its latest checkpoint, or --step), add a fresh "
        "classification head and fine-tune it on a task, once per seed, into DIR/seed-N (ordinary "
        "run directories: metrics.jsonl, summary.json, checkpoints). DIR/finetune.json holds each "
        "seed's score on the validation split and their mean ± sd; a run whose loss becomes NaN "
        f"ends 'diverged' and counts as a failure. Recipe: {recipe}, warm-up {WARMUP:.0%}, {EPOCHS} "
        "epochs; dotted overrides (--train.lr 5e-5, --data.max_examples 2000) change it (`blocklab train "
        "--help` lists every option).",
        epilog=TASKS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run", required=True, help="the directory of an mlm run (blocklab train --model.task mlm)")
    p.add_argument("--task", required=True, help="a code task or classification data (see below)")
    p.add_argument("--out", required=True, help="output directory (one run directory per seed inside)")
    p.add_argument("--seeds", default="0", help="comma-separated fine-tuning seeds (default: 0)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step of the mlm run (default: its latest)")
    p.add_argument("--epochs", type=float, default=EPOCHS, help=f"epochs over the training split (default: {EPOCHS})")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="fine-tune every seed afresh, replacing what DIR/seed-N holds (default: finished seeds with "
        "these settings are kept, an interrupted one resumes, other settings are refused)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args) -> int:
    from blocklab.cli import status
    from blocklab.errors import UserError
    from blocklab.training.config import parse_overrides
    from blocklab.training.finetune import finetune

    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {args.seeds!r}: expected distinct integers >= 0")
    if args.epochs <= 0 or (args.step is not None and args.step < 0):
        raise UserError("--epochs must be positive and --step >= 0")
    result = finetune(
        args.run,
        args.task,
        args.out,
        seeds,
        args.step,
        args.epochs,
        parse_overrides(args.overrides),
        progress=False if args.no_progress else None,
        overwrite=args.overwrite,
        log=status,
    )
    print(result_line(result, args.out))
    return 130 if result["status"] == "interrupted" else 0


def result_line(result: dict, out) -> str:
    """The fine-tuning's outcome in one line: the mean ± sd over the seeds that completed, or the score of
    the one seed that did (no spread to give)."""

    def f(x) -> str:
        return "n/a" if x is None else f"{x:.1f}"

    scores = ", ".join("diverged" if st == "diverged" else f(s) for s, st in zip(result["scores"], result["statuses"]))
    mean = f(result["mean"])
    if result["mean"] is not None:
        mean += " (one seed)" if result["sd"] is None else f" ± {result['sd']:.1f}"
    return (
        f"{result['task']}: {result['metric']} {mean} over seeds {result['seeds']} ({scores}); majority "
        f"baseline {f(result['majority_baseline'])}; {result['failed']} diverged; {out}/finetune.json"
    )
