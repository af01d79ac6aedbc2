"""`blocklab` command line: one module per subcommand, each with `add_parser(sub)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
import importlib
import sys

from blocklab.errors import UserError
from blocklab.overrides import split_overrides

COMMANDS = ("train", "finetune", "generate", "translate", "probe", "compare", "report", "bench", "check")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="blocklab",
        description="Build, train and diagnose Transformer blocks (Post-LN, Pre-LN, parallel, SAS, SAS-P).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"blocklab.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    rest, overrides = split_overrides(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    args = parser.parse_args(rest)
    args.overrides = overrides
    if overrides and not getattr(args, "accepts_overrides", False):
        parser.error(f"blocklab {args.command} takes no {overrides[0]} option")
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"blocklab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"blocklab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
