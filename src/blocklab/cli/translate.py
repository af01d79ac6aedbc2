"""blocklab translate --run DIR [--input FILE] [--beam 5]"""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate lines with a trained translation model",
                       description="Read source sentences, one a line (standard input, or --input FILE), and write "
                                   "one translation a line, from the latest checkpoint of a translation run "
                                   "(model.task = 'translation'). An empty line gives an empty line.")
    p.add_argument("--run", required=True, help="run directory written by blocklab train")
    p.add_argument("--input", help="a UTF-8 text file of source sentences (default: standard input)")
    p.add_argument("--beam", type=int, default=5, help="beam size, 1 = greedy (default: 5)")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="hypotheses are ranked by log-probability / length ** this (default: 1.0)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="longest translation in tokens (default: the model's max_seq_len - 1)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.set_defaults(func=run)


def load_translation_run(run_dir, device: str = "cpu"):
    """(model, tokenizer, config) of a translation run; anything else is one clear line."""
    from pathlib import Path

    from blocklab.errors import UserError
    from blocklab.training.config import load_config
    from blocklab.training.generate import load_run

    if (Path(run_dir) / "config.toml").is_file():  # the task first: a language model's checkpoint is not read
        task = load_config(Path(run_dir) / "config.toml").model.task
        if task != "translation":
            raise UserError(f"{run_dir} is a {task} model, not a translation model "
                            "(train one with --model.task translation)")
    model, tokenizer, cfg = load_run(run_dir, device)
    if hasattr(tokenizer, "encode_special_tokens"):  # "<eod>" typed in a sentence is text, not the token
        tokenizer.encode_special_tokens = True
    return model.eval(), tokenizer, cfg


def translate_lines(run, lines: list[str], beam: int = 5, length_penalty: float = 1.0,
                    max_new_tokens: int | None = None, batch_size: int = 32, device: str = "cpu") -> list[str]:
    """One translation per line; `run` is a run directory or the result of load_translation_run."""
    from blocklab.training.translation import detokenize, translate_ids

    model, tokenizer, cfg = run if isinstance(run, tuple) else load_translation_run(run, device)
    eod, pad, limit = model.eos_id, model.pad_id, cfg.model.max_seq_len
    todo = [i for i, line in enumerate(lines) if line.strip()]
    # A source longer than the model's positions keeps its first max_seq_len - 1 tokens and its <eod>.
    sources = [tokenizer.encode(lines[i].strip(), add_special_tokens=False).ids[:limit - 1] + [eod] for i in todo]
    ids = translate_ids(model, sources, pad, device, batch_size, beam, max_new_tokens, length_penalty)
    out = [""] * len(lines)
    for i, row in zip(todo, ids):
        out[i] = detokenize(tokenizer, eod, row)
    return out


def run(args) -> int:
    from blocklab.errors import UserError

    if args.beam < 1 or args.batch_size < 1 or (args.max_new_tokens is not None and args.max_new_tokens < 1):
        raise UserError("--beam, --batch-size and --max-new-tokens must be positive integers")
    from blocklab.data.lines import read_lines

    loaded = load_translation_run(args.run, args.device)  # a bad run fails before standard input is read
    lines = read_lines(args.input, "--input")
    for line in translate_lines(loaded, lines, args.beam, args.length_penalty, args.max_new_tokens,
                                args.batch_size, args.device):
        print(line)
    return 0
