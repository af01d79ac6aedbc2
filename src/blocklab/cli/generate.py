"""blocklab generate --run DIR --prompt TEXT [--step N]"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="sample text from a trained causal model",
        description="Sample a continuation of --prompt from the latest checkpoint of a clm run (or that of "
        "--step). A damaged latest checkpoint gives the newest one that verifies, said on stderr.",
    )
    p.add_argument("--run", required=True, help="run directory written by blocklab train")
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to sample (default: 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature, 0 = greedy (default: 0.8)")
    p.add_argument("--top-k", type=int, default=50, help="sample among the k most likely tokens, 0 = all (default: 50)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step to read (default: the latest)")
    p.set_defaults(func=run)


def run(args) -> int:
    from blocklab.cli.output import print_lines
    from blocklab.errors import UserError
    from blocklab.training.generate import generate_text

    if args.max_new_tokens <= 0 or args.temperature < 0 or args.top_k < 0:
        raise UserError("--max-new-tokens must be > 0, --temperature >= 0 and --top-k >= 0")
    if args.step is not None and args.step < 0:
        raise UserError(f"--step {args.step} is not valid; give a checkpoint's step (>= 0)")
    text = generate_text(
        args.run,
        args.prompt,
        args.max_new_tokens,
        args.temperature,
        args.top_k or None,
        args.seed,
        args.device,
        args.step,
    )
    print_lines([text])
    return 0
