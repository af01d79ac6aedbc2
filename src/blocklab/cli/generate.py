"""blocklab generate --run DIR --prompt TEXT"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="sample text from a trained causal model",
        description="Sample a continuation of --prompt from the latest checkpoint of a clm run.",
    )
    p.add_argument("--run", required=True, help="run directory written by blocklab train")
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to sample (default: 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature, 0 = greedy (default: 0.8)")
    p.add_argument("--top-k", type=int, default=50, help="sample among the k most likely tokens, 0 = all (default: 50)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.set_defaults(func=run)


def run(args) -> int:
    from blocklab.errors import UserError
    from blocklab.training.generate import generate_text

    if args.max_new_tokens <= 0 or args.temperature < 0 or args.top_k < 0:
        raise UserError("--max-new-tokens must be > 0, --temperature >= 0 and --top-k >= 0")
    print(
        generate_text(
            args.run, args.prompt, args.max_new_tokens, args.temperature, args.top_k or None, args.seed, args.device
        )
    )
    return 0
