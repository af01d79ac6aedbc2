"""blocklab train [CONFIG.toml] --out DIR [--resume | --overwrite] [--SECTION.KEY VALUE ...]"""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train one model into a run directory",
        description="Train one model. Settings come from an optional TOML file with [model], [data] and "
        "[train] sections, then from dotted overrides such as --model.block sas-p. The run "
        "directory gets config.toml, metrics.jsonl, summary.json, checkpoints/ and tb/ "
        "(TensorBoard). Under torchrun the same command trains with DistributedDataParallel, or FSDP2 with "
        "--train.parallel fsdp (sharded checkpoints); --train.grad_accum and --train.activation_checkpointing "
        "trade compute for memory (README: Scaling out). A block's paper recipe (listed below) fills "
        "in the settings that neither the file nor an override sets; the training log and "
        'summary.json ("recipe") say which values it applied.',
        epilog=_epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", help="TOML config file (optional)")
    p.add_argument("--out", required=True, help="run directory")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its last checkpoint (its saved config, plus overrides)",
    )
    mode.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress on stderr (a bar on a terminal, a plain line every 30 s elsewhere)",
    )
    p.set_defaults(func=run, accepts_overrides=True)


def _epilog() -> str:
    """Every option, then each block's equation and recipe: from torch-free tables, computed only for --help."""
    from blocklab.block_table import describe_blocks, describe_recipes
    from blocklab.settings import help_text
    from blocklab.training.config import SECTIONS

    return (
        "options (--SECTION.KEY VALUE, or --SECTION.KEY=VALUE):\n"
        + help_text(SECTIONS)
        + "\n\n"
        + describe_blocks()
        + "\n\nblock recipes (the paper's settings; the learning rate is always yours):\n"
        + describe_recipes()
    )


def run(args) -> int:
    from pathlib import Path

    from blocklab.cli import status
    from blocklab.training.config import load_config

    saved = Path(args.out) / "config.toml"
    # Resuming starts from the run's own resolved config, so values derived from the first
    # invocation (the 5% warm-up, say) survive a changed --train.steps. That config already holds the
    # recipe values the run took, so the recipe is not applied to it again (the trainer keeps the list).
    from_saved = not args.config and args.resume and saved.is_file()
    base = saved if from_saved else (args.config or None)
    if not from_saved:
        # The run's own settings are checked first, without the recipe: looking a block's recipe up imports
        # the blocks (torch, seconds), and a bad value (an unknown block or norm) is refused before that. A
        # recipe fills only settings the run leaves unset, and no recipe's setting enters a cross-field check
        # that the package default fails, so what this refuses the full load refuses too.
        load_config(base, args.overrides)
    cfg = load_config(base, args.overrides, recipe=not from_saved)
    from blocklab.training.trainer import train

    summary = train(
        cfg,
        args.out,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=False if args.no_progress else None,
        log=status,
    )
    if (summary.world_size or 1) == 1 or __import__("os").environ.get("RANK", "0") == "0":
        shown = ("status", "step", "final_loss", "final_eval_loss", "tokens_per_s")
        print(json.dumps({k: getattr(summary, k) for k in shown}))
    return {"completed": 0, "interrupted": 130, "diverged": 3, "stalled": 4}[summary.status]
