"""`blocklab` command line: one module per subcommand, each with `add_parser(sub)` and `run(args) -> int`."""
from __future__ import annotations

import argparse
import importlib
import sys

from blocklab.errors import UserError

COMMANDS = ("train", "generate", "translate", "probe", "compare", "report", "bench", "check")
OVERRIDE_SECTIONS = ("model", "data", "train")


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """Pull `--section.key value` pairs out before argparse, which would take the value for a positional."""
    rest, over, i = [], [], 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--") and tok[2:].split(".", 1)[0] in OVERRIDE_SECTIONS and "." in tok:
            over.append(tok)
            if "=" not in tok and i + 1 < len(argv):
                over.append(argv[i + 1])
                i += 1
        else:
            rest.append(tok)
        i += 1
    return rest, over


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
