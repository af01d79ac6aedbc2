"""`blocklab` command line: one module per subcommand, each with `add_parser(sub)` and `run(args) -> int`.

Start-up imports nothing heavy: a subcommand module imports torch and the library inside its `run`, only the
named subcommand's parser is built, and a help text that needs the library is a callable, computed only when
the help is printed. So `blocklab --help` and argument errors answer at once, and a Ctrl-C at any point ends
with one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from blocklab import interrupts
from blocklab.errors import UserError
from blocklab.overrides import split_overrides

# Each subcommand and its one-line help for `blocklab --help` (a test keeps them equal to each module's own).
COMMANDS = {
    "train": "train one model into a run directory",
    "finetune": "fine-tune the encoder of an mlm run on a classification task",
    "generate": "sample text from a trained causal model",
    "translate": "translate lines with a trained translation model",
    "probe": "signal propagation at initialisation: hidden norms, gradients, rank collapse",
    "compare": "train several configurations side by side and write a report",
    "report": "write the HTML and Markdown report of a sweep or of runs",
    "bench": "tokens/s, MFU and peak memory of training steps per block",
    "check": "every attention path against the reference, and their speed, on this machine",
    "export": "write a run's model as a folder Hugging Face transformers loads",
    "eval": "evaluate a run with the lm-eval harness (its tasks, or blocklab's offline ones)",
}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose description and epilog may be callables, computed when the help is printed:
    a help text that lists every block or recipe needs the library (torch), an argument error does not."""

    def format_help(self) -> str:
        for attr in ("description", "epilog"):
            text = getattr(self, attr)
            if callable(text):
                setattr(self, attr, text())
        return super().format_help()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand in full, or with `command`, that one in full and the
    others by name and help only (enough to parse a command line that names `command`)."""
    parser = Parser(
        prog="blocklab",
        description="Build, train and diagnose Transformer blocks (Post-LN, Pre-LN, parallel, SAS, SAS-P).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"blocklab.cli.{name}").add_parser(sub)
        else:
            sub.add_parser(name, help=help, add_help=False)
    return parser


def _command(argv: list[str]) -> str:
    """The subcommand a command line names (its first word: the top level has no option but --help), or ""."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else ""


def status(*parts) -> None:
    """A status line: to stderr, so that stdout holds only a command's results (tables, paths, verdicts)."""
    print(*parts, file=sys.stderr, flush=True)


def os_error_line(e: OSError) -> str:
    """'PATH: REASON' (both paths of a rename or a copy), for an OSError that no command turned into a user error."""
    reason = e.strerror or str(e)
    paths = [str(p) for p in (e.filename, e.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


def main(argv: list[str] | None = None) -> int:
    args = None
    try:
        rest, overrides = split_overrides(sys.argv[1:] if argv is None else list(argv))
        parser = build_parser(_command(rest))
        args = parser.parse_args(rest)
        args.overrides = overrides
        if overrides and not getattr(args, "accepts_overrides", False):
            parser.error(f"blocklab {args.command} takes no {overrides[0]} option")
        code = int(args.func(args) or 0)
        # A Ctrl-C the command did not see (a library swallowed it on the way); one it saw already said so (130).
        if interrupts.take() and code != 130:
            raise KeyboardInterrupt
        return code
    except UserError as e:
        print(f"{_prog(args)}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{_prog(args)}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`blocklab ... | head`): nothing to say, and the interpreter's
        # last flush of stdout must not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        print(f"{_prog(args)}: error: {os_error_line(e)}", file=sys.stderr)
        return 1


def _prog(args) -> str:
    command = getattr(args, "command", None)
    return f"blocklab {command}" if command else "blocklab"


if __name__ == "__main__":
    sys.exit(main())
