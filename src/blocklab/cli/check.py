"""blocklab check [--device auto|cpu|cuda]: every attention path against the reference, and their speed."""

from __future__ import annotations

import os
import sys
import time

from blocklab.cli.bench import HelpFormatter, to_int
from blocklab.errors import UserError

DESCRIPTION = """\
Check every attention path on this machine against the reference, then time them side by
side. Run it first on a new GPU: it says whether the kernels give the right numbers there
and which path is fastest.

paths     shaped attention (SAS, per head (alpha I + beta A - gamma C) V): sdpa, fused (the
          Triton kernel; CUDA, or CPU under TRITON_INTERPRET=1, checked at small T only and
          not timed) and materialized (the T x T formula); the kernel's competitors
          sdpa-compiled:flash, :cudnn, :efficient, :math (the sdpa path under torch.compile,
          SDPA pinned to one backend; checked at T=300 only; on CPU, which has only the flash
          and math backends, in float32 only and timed at T<=512; --no-compiled leaves them
          out); plain softmax attention (pre-ln's MHA): mha-sdpa, mha-materialized. A path
          that cannot run here is "unavailable", with the reason; a backend with no kernel for
          some inputs (fp32, a mask) is checked on the others and the skipped cases are named.
correct   forward output and the gradients of q, k, v, alpha, beta, gamma (random gains,
          not the init values) against the materialised formula in float64, at T=17 and
          T=300, causal and bidirectional with right padding, in float32 and bfloat16
          (autocast, as training runs). Error: max|x - ref| / max(1, max|ref|); tolerance
          fp32 1e-4 on CPU, 5e-3 on CUDA (TF32 allowed), bf16 5e-2.
speed     forward+backward, causal, at each --shapes T (H=12, D=64, B=16384/T, bf16 on CUDA;
          H=2, B=1024/T, fp32 on CPU), median over --reps, round-robin; ratios against
          sdpa (mha-* against mha-sdpa). materialized is skipped where its T x T tensors
          would not fit in memory. Each shaped path's time is also given over plain causal
          SDPA's at the same shape (mha-sdpa: what attention without shaping costs).

The table goes to stdout, progress to stderr. Exit status 0 when every available path is
correct, 1 when one is wrong. The verdicts end with the path attn_impl="auto" picks here (a
warning when it is wrong or slower than another attn_impl path), then the fastest correct
shaped path per range of timed T, compiled competitors included.
"""

EPILOG = """\
examples:
  blocklab check                         # the GPU if there is one, else the CPU
  blocklab check --device cpu --shapes 128,1024
  blocklab check --device cuda --reps 50 --json check.json
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="every attention path against the reference, and their speed, on this machine",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--device",
        default="auto",
        metavar="{auto,cpu,cuda}",
        help="cpu, cuda, or auto = cuda when available (default: auto)",
    )
    p.add_argument(
        "--shapes",
        default="128,1024,4096",
        metavar="T1,T2,...",
        help="sequence lengths to time, comma-separated (default: 128,1024,4096; the paper's is 128)",
    )
    p.add_argument(
        "--reps", default=None, metavar="N", help="timed repetitions per path and shape (default: 20 on CUDA, 5 on CPU)"
    )
    p.add_argument(
        "--no-compiled",
        action="store_true",
        help="leave out the compiled competitors (sdpa-compiled:*): each costs a compile per input signature",
    )
    p.add_argument(
        "--json", default=None, metavar="PATH", help="also write the full result (every error, every time) as JSON"
    )
    p.set_defaults(func=run)


def parse_shapes(text: str) -> list[int]:
    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise UserError("--shapes is empty; give sequence lengths such as 128,1024,4096")
    return [to_int(s, "--shapes", 1) for s in parts]


def run(args) -> int:
    from blocklab.bench.check import run_check
    from blocklab.bench.check_report import render_text
    from blocklab.bench.config import resolve_device
    from blocklab.bench.report import write_json

    device = resolve_device(args.device)
    shapes = parse_shapes(args.shapes)
    reps = to_int(args.reps, "--reps", 1) if args.reps is not None else None
    if args.json and (os.path.isdir(args.json) or not os.access(os.path.dirname(os.path.abspath(args.json)), os.W_OK)):
        raise UserError(f"--json {args.json}: cannot write there")  # now, not after the timing
    t0 = time.perf_counter()

    def progress(line: str) -> None:
        print(f"blocklab check: [{time.perf_counter() - t0:5.1f}s] {line}", file=sys.stderr, flush=True)

    result = run_check(device, shapes=shapes, reps=reps, progress=progress, compiled=not args.no_compiled)
    print(render_text(result))
    if args.json:
        write_json(result, args.json)
        print(f"blocklab check: wrote {args.json}", file=sys.stderr)
    return 0 if result["ok"] else 1
