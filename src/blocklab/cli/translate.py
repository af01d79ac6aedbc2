"""blocklab translate --run DIR [--input FILE] [--beam 5] [--step N]: the arguments and the text; the translating is
blocklab.inference's."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "translate",
        help="translate lines with a trained translation model",
        description="Read source sentences, one a line (standard input, or --input FILE), and write "
        "one translation a line, from the latest checkpoint of a translation run "
        "(model.task = 'translation'), or that of --step. An empty line gives an empty line. A damaged "
        "latest checkpoint gives the newest one that verifies, said on stderr.",
    )
    p.add_argument("--run", required=True, help="run directory written by blocklab train")
    p.add_argument("--input", help="a UTF-8 text file of source sentences (default: standard input)")
    p.add_argument("--beam", type=int, default=5, help="beam size, 1 = greedy (default: 5)")
    p.add_argument(
        "--length-penalty",
        type=float,
        default=1.0,
        help="hypotheses are ranked by log-probability / length ** this (default: 1.0)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="longest translation in tokens (default: the model's max_seq_len - 1)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step to read (default: the latest)")
    p.set_defaults(func=run)


def run(args) -> int:
    from blocklab.errors import UserError

    if args.beam < 1 or args.batch_size < 1 or (args.max_new_tokens is not None and args.max_new_tokens < 1):
        raise UserError("--beam, --batch-size and --max-new-tokens must be positive integers")
    if args.step is not None and args.step < 0:
        raise UserError(f"--step {args.step} is not valid; give a checkpoint's step (>= 0)")
    from blocklab.cli.output import print_lines
    from blocklab.data.lines import read_lines
    from blocklab.inference import load_translation_run, translate_lines

    loaded = load_translation_run(args.run, args.device, args.step)  # a bad run fails before standard input is read
    lines = read_lines(args.input, "--input")
    out = translate_lines(
        loaded, lines, args.beam, args.length_penalty, args.max_new_tokens, args.batch_size, args.device
    )
    print_lines(out)
    empty = sum(1 for src, tgt in zip(lines, out) if src.strip() and not tgt.strip())
    if empty:
        # An undertrained model often ends every sentence at once: an empty line is its whole translation.
        print(
            f"blocklab translate: {empty} of {sum(1 for x in lines if x.strip())} translations are empty (the "
            "model predicted the end of the sentence first): the run may need more training",
            file=sys.stderr,
        )
    return 0
