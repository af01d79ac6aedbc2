"""blocklab bench --blocks pre-ln,sas,sas-p --shape d=768,heads=12,ff=3072,T=128,layers=6,vocab=2048,batch=8"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from blocklab.errors import UserError

DEFAULT_BLOCKS = "pre-ln,sas,sas-p"
DEFAULT_SHAPE = "d=768,heads=12,ff=3072,T=128,layers=6,vocab=2048,batch=8"

DESCRIPTION = """\
Benchmark full training steps (forward, backward, AdamW step with param_groups, zero_grad)
of several blocks at one shape, on one machine, in one run:

  tokens/s   batch * T / median step time. Blocks are timed interleaved (round-robin, the
             order rotating each round) after --warmup untimed steps each; the median and
             the spread (IQR, min-max) over --reps rounds are reported.
  MFU        training-step FLOPs (counted once per block with
             torch.utils.flop_counter.FlopCounterMode on one forward+backward) / median step
             time / the matrix-multiply peak measured here (best of several square matmuls
             at --peak-size, before and after the timing, at the run's precision).
  vs ref     tokens/s over the reference block (pre-ln) in the same precision and mode,
             printed beside the ceiling FLOPs(ref)/FLOPs(block) and the fraction reached.
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
  blocklab bench --blocks pre-ln,sas-p --shape d=256,heads=4,ff=1024,layers=2,batch=1 \\
      --memory-scaling 512,1024,2048,4096,8192 --scaling-only
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the hand-wrapped description; wraps option help without breaking `pre-ln` at its hyphen."""

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="tokens/s, MFU and peak memory of training steps per block",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--blocks",
        default=DEFAULT_BLOCKS,
        metavar="LIST",
        help=f"comma-separated block names (default: {DEFAULT_BLOCKS})",
    )
    p.add_argument(
        "--shape",
        default=DEFAULT_SHAPE,
        help=f"model and batch shape, see below (default: {DEFAULT_SHAPE.replace(',', ', ')}, the named shape cpu-target)",
    )
    p.add_argument(
        "--precision",
        default="fp32",
        metavar="{fp32,bf16,fp16}",
        help="fp32, bf16 (autocast) or fp16 (autocast + GradScaler, CUDA only; refused on CPU) (default: fp32)",
    )
    p.add_argument("--compile", action="store_true", help="run the model through torch.compile (default: eager)")
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
        "[:sdpa|fused|materialized], e.g. pre-ln:bf16:compile,sas-p:bf16:compile (default: none)",
    )
    p.add_argument(
        "--attn-impl",
        default="sdpa",
        metavar="{sdpa,fused,materialized,auto}",
        help="sdpa (SDPA + running mean, default), fused (the Triton kernel, CUDA), "
        "materialized (T x T matrix) or auto (the measured default of the device, see README)",
    )
    p.add_argument(
        "--adamw",
        default="fused",
        metavar="{fused,foreach,loop}",
        help="AdamW implementation: fused (one kernel; 4-7x faster than loop on CPU), foreach, or loop "
        "(PyTorch's CPU default) (default: fused)",
    )
    p.add_argument("--reps", default="5", metavar="N", help="timed round-robin rounds (default: 5)")
    p.add_argument("--steps", default="1", metavar="N", help="timed steps per block per round (default: 1)")
    p.add_argument("--warmup", default="2", metavar="N", help="untimed steps per block before timing (default: 2)")
    p.add_argument(
        "--peak-size", default=None, metavar="N", help="n of the n x n matmul peak (default: 2048 on CPU, 8192 on CUDA)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the per-block peak-memory processes")
    p.add_argument(
        "--memory-scaling",
        default=None,
        metavar="T1,T2,...",
        help="also measure forward+backward peak memory at these sequence lengths (default: off)",
    )
    p.add_argument(
        "--scaling-blocks", default=None, metavar="LIST", help="blocks of the memory scaling (default: --blocks)"
    )
    p.add_argument(
        "--scaling-impls",
        default="sdpa,materialized",
        metavar="LIST",
        help="attention paths of the memory scaling (default: sdpa,materialized)",
    )
    p.add_argument("--scaling-only", action="store_true", help="run only the memory scaling (no step timing)")
    p.add_argument(
        "--reference", default="pre-ln", metavar="BLOCK", help="block the ratios are taken against (default: pre-ln)"
    )
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


def to_int(text, option: str, minimum: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise UserError(f"{option} {text!r} is not an integer") from None
    if value < minimum:
        raise UserError(f"{option} must be at least {minimum}, got {value}")
    return value


def config_from_args(args, argv: list[str] | None = None):
    """The BenchConfig the arguments describe (every check raises UserError)."""
    import torch

    from blocklab.bench.config import (
        BenchConfig,
        Variant,
        parse_blocks,
        parse_ints,
        parse_list,
        parse_shape,
        parse_variants,
        resolve_device,
        validate,
    )

    if args.threads is not None:
        torch.set_num_threads(to_int(args.threads, "--threads", 1))
    device = resolve_device(args.device)
    blocks = parse_blocks(args.blocks)
    if args.reference not in blocks and not args.scaling_only:
        print(
            f"blocklab bench: note: reference block {args.reference!r} is not benchmarked; no ratios", file=sys.stderr
        )
    variants = [Variant(b, args.precision, args.compile, args.attn_impl) for b in blocks]
    if args.vs_fp32_eager and (args.precision != "fp32" or args.compile):
        variants += [Variant(b, "fp32", False, args.attn_impl) for b in blocks]
    if args.extra:
        variants += parse_variants(args.extra)
    cfg = BenchConfig(
        shape=parse_shape(args.shape),
        variants=variants,
        device=device,
        reps=to_int(args.reps, "--reps", 1),
        steps=to_int(args.steps, "--steps", 1),
        warmup=to_int(args.warmup, "--warmup", 0),
        memory=not args.no_memory,
        peak_size=to_int(args.peak_size, "--peak-size", 16) if args.peak_size is not None else None,
        scaling_T=parse_ints(args.memory_scaling, "--memory-scaling") if args.memory_scaling else [],
        scaling_blocks=parse_blocks(args.scaling_blocks) if args.scaling_blocks else [],
        scaling_impls=parse_list(args.scaling_impls, "--scaling-impls"),
        scaling_precision=args.precision,
        skip_steps=args.scaling_only,
        reference=args.reference,
        adamw=args.adamw,
        command="blocklab bench " + shlex.join(argv if argv is not None else sys.argv[2:]),
    )
    return validate(cfg)


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
