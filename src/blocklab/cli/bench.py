"""blocklab bench --blocks pre-ln,sas,sas-p --shape d=768,heads=12,ff=3072,T=128,layers=6,vocab=2048,batch=8"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import textwrap

from blocklab.errors import UserError

DEFAULT_BLOCKS = "pre-ln,sas,sas-p"

DESCRIPTION = """\
Benchmark full training steps (forward, backward, optimizer step: AdamW with param_groups,
or --optimizer muon, zero_grad) of several blocks at one shape, on one machine, in one run:

  tokens/s   batch * T / median step time. Blocks are timed interleaved (round-robin, the
             order rotating each round) after --warmup untimed steps each; the median and
             the spread (IQR, min-max) over --reps rounds are reported.
  MFU        training-step FLOPs (counted once per block with
             torch.utils.flop_counter.FlopCounterMode on one forward+backward) / median step
             time / the matrix-multiply peak measured here (best of several square matmuls
             at --peak-size, before and after the timing, at the run's precision).
  vs ref     tokens/s over the reference block (pre-ln) in the same precision and mode,
             printed beside the ceiling FLOPs(ref)/FLOPs(block) and the fraction reached.
  vs AdamW   with --optimizer muon --vs-adamw: each Muon variant's step time over the same
             variant's with AdamW, the median (and range) of the rounds' ratios, each round
             timing both, and the difference of the median steps.
  peak mem   each block alone in a fresh process: peak RSS minus the baseline on CPU,
             torch.cuda.max_memory_allocated on CUDA (see blocklab.bench.worker).

--memory-scaling T1,T2,... adds peak memory of forward+backward at those sequence lengths
for each block with --scaling-impls (sdpa: fused shaped attention, O(T d); materialized:
the T x T matrix, O(T^2)); configurations predicted not to fit are skipped and listed.

Progress goes to stderr; the table to stdout; --json writes everything.
"""

EPILOG = """\
shapes: key=value pairs (keys: d, heads, ff, T, layers, vocab, batch; missing keys take the
default shape's values), a named shape (cpu-target, he-codeparrot, tiny), or a named shape
followed by overrides, e.g. he-codeparrot,batch=32.

examples:
  blocklab bench --blocks pre-ln,sas-p --shape tiny --reps 3
  blocklab bench --blocks pre-ln,sas-p --precision bf16 --compile --vs-fp32-eager
  blocklab bench --blocks pre-ln --shape tiny --optimizer muon --vs-adamw
  blocklab bench --blocks pre-ln,sas-p --shape d=256,heads=4,ff=1024,layers=2,batch=1 \\
      --memory-scaling 512,1024,2048,4096,8192 --scaling-only
"""


class WrappingHelpFormatter(argparse.HelpFormatter):
    """Wraps option help without breaking `pre-ln` at its hyphen, and a comma-separated value too long for a
    line (the default shape) after a comma."""

    def _split_lines(self, text, width):
        return _Wrapper(width, break_on_hyphens=False).wrap(" ".join(text.split()))


class HelpFormatter(argparse.RawDescriptionHelpFormatter, WrappingHelpFormatter):
    """Keeps the hand-wrapped description; option help as WrappingHelpFormatter wraps it."""


class _Wrapper(textwrap.TextWrapper):
    def _split(self, text):
        chunks = super()._split(text)
        return [piece for c in chunks for piece in (re.split(r"(?<=,)", c) if len(c) > self.width else [c])]


def add_parser(sub) -> None:
    from blocklab.bench.config import BenchConfig, Variant
    from blocklab.settings import add_option

    p = sub.add_parser(
        "bench",
        help="tokens/s, MFU and peak memory of training steps per block",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    # Options that set one setting of BenchConfig or Variant take their flag, help and default from its
    # declaration (blocklab.bench.config); the rest say what they build.
    p.add_argument(
        "--blocks",
        default=DEFAULT_BLOCKS,
        metavar="LIST",
        help=f"comma-separated block names (default: {DEFAULT_BLOCKS})",
    )
    add_option(p, BenchConfig, "shape")
    add_option(p, Variant, "precision")
    add_option(p, Variant, "compile")
    p.add_argument(
        "--vs-fp32-eager",
        action="store_true",
        help="also time every block in fp32 eager in the same round-robin and report the speedup",
    )
    p.add_argument(
        "--extra",
        default=None,
        metavar="VARIANTS",
        help="more variants timed in the same round-robin, comma-separated BLOCK[:PRECISION][:compile|eager]"
        "[:sdpa|fused|materialized][:adamw|muon], e.g. pre-ln:bf16:compile,sas-p:bf16:compile (default: none)",
    )
    add_option(p, Variant, "attn_impl")
    add_option(p, Variant, "optimizer")
    p.add_argument(
        "--vs-adamw",
        action="store_true",
        help="with --optimizer muon: also time every variant with AdamW in the same round-robin and report "
        "Muon's step time against it, round by round",
    )
    add_option(p, BenchConfig, "adamw")
    for name in ("reps", "steps", "warmup", "peak_size"):
        add_option(p, BenchConfig, name, metavar="N")
    p.add_argument("--no-memory", action="store_true", help="skip the per-block peak-memory processes")
    add_option(p, BenchConfig, "scaling_T", metavar="T1,T2,...")
    add_option(p, BenchConfig, "scaling_blocks", metavar="LIST")
    add_option(p, BenchConfig, "scaling_impls", metavar="LIST")
    add_option(p, BenchConfig, "skip_steps")
    add_option(p, BenchConfig, "reference", metavar="BLOCK")
    p.add_argument(
        "--threads", default=None, metavar="N", help="torch CPU threads (default: torch's default, one per core)"
    )
    p.add_argument(
        "--device",
        default="auto",
        metavar="{auto,cpu,cuda}",
        help="cpu, cuda, or auto = cuda when available (default: auto)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="write the full result as JSON (default: none)")
    p.set_defaults(func=run)


def to_int(text, option: str, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise UserError(f"{option} {text!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise UserError(f"{option} must be at least {minimum}, got {value}")
    return value


def _given(**values) -> dict:
    """The options given on the command line: the others keep the declared defaults."""
    return {k: v for k, v in values.items() if v is not None}


def config_from_args(args, argv: list[str] | None = None):
    """The BenchConfig the arguments describe (every check raises UserError)."""
    from dataclasses import replace

    import torch

    from blocklab.bench.config import (
        BenchConfig,
        Variant,
        check_device,
        parse_blocks,
        parse_ints,
        parse_list,
        parse_shape,
        parse_variants,
        resolve_device,
    )

    if args.threads is not None:
        torch.set_num_threads(to_int(args.threads, "--threads", 1))
    device = resolve_device(args.device)
    blocks = parse_blocks(args.blocks)
    mode = _given(precision=args.precision, compile=args.compile, attn_impl=args.attn_impl, optimizer=args.optimizer)
    variants = [Variant(b, **mode) for b in blocks]
    if args.vs_adamw:
        if all(v.optimizer == "adamw" for v in variants):
            raise UserError("--vs-adamw times Muon against AdamW: give --optimizer muon")
        variants += [p for p in (replace(v, optimizer="adamw") for v in variants) if p not in variants]
    if args.vs_fp32_eager:
        eager = (Variant(v.block, attn_impl=v.attn_impl, optimizer=v.optimizer) for v in variants)
        variants += [p for p in eager if p not in variants]
    if args.extra:
        variants += parse_variants(args.extra)
    cfg = BenchConfig(
        **_given(
            shape=parse_shape(args.shape) if args.shape is not None else None,
            reps=to_int(args.reps, "--reps") if args.reps is not None else None,
            steps=to_int(args.steps, "--steps") if args.steps is not None else None,
            warmup=to_int(args.warmup, "--warmup") if args.warmup is not None else None,
            peak_size=to_int(args.peak_size, "--peak-size") if args.peak_size is not None else None,
            scaling_T=parse_ints(args.memory_scaling, "--memory-scaling") if args.memory_scaling else None,
            scaling_blocks=parse_blocks(args.scaling_blocks) if args.scaling_blocks else None,
            scaling_impls=parse_list(args.scaling_impls, "--scaling-impls") if args.scaling_impls is not None else None,
            scaling_precision=args.precision,
            skip_steps=args.scaling_only,
            reference=args.reference,
            adamw=args.adamw,
        ),
        variants=variants,
        device=device,
        memory=not args.no_memory,
        command="blocklab bench " + shlex.join(argv if argv is not None else sys.argv[2:]),
    )
    if cfg.reference not in blocks and not cfg.skip_steps:
        print(f"blocklab bench: note: reference block {cfg.reference!r} is not benchmarked; no ratios", file=sys.stderr)
    return check_device(cfg)


def run(args, argv: list[str] | None = None) -> int:
    from blocklab.bench import render_text, run_bench, write_json

    cfg = config_from_args(args, argv)
    if args.json:
        # fail on an unwritable path now, not after minutes of benchmarking
        folder = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json) or not os.access(
            folder if os.path.isdir(folder) else os.path.dirname(folder), os.W_OK
        ):
            raise UserError(f"--json {args.json}: cannot write there")
    result = run_bench(cfg)
    print(render_text(result))
    if args.json:
        write_json(result, args.json)
        print(f"blocklab bench: wrote {args.json}", file=sys.stderr)
    return 0
