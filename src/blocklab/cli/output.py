"""Standard output of the commands that print their results (generate, translate): a full disk or a
closed pipe behind a redirection is one line, not a traceback."""

from __future__ import annotations

import errno
import os
import sys

from blocklab.errors import UserError


def print_lines(lines) -> None:
    """Print each of `lines` and flush. A reader that went away (`| head`) ends the output quietly."""
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        _detach()
    except OSError as e:
        _detach()
        what = "free some space or redirect it to another disk" if e.errno == errno.ENOSPC else "redirect it elsewhere"
        raise UserError(f"cannot write the output to standard output ({e.strerror or e}): {what}") from None


def _detach() -> None:
    # What is left in the buffer would fail again when the interpreter flushes it at exit, with a traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
