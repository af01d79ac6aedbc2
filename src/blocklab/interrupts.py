"""A Ctrl-C is never lost. Python turns SIGINT into a KeyboardInterrupt raised wherever the main thread is; raised
inside code that catches every exception (some libraries' optional imports, C extensions that clear a failed
call's error while torch and its kernels load), it vanishes and the command runs on as if no key were pressed.
The handler installed here raises the same KeyboardInterrupt and also records the signal, so the command line
(cli.main) and the training loop (training/stopping.SignalFlag) can still honour one that was swallowed.
"""

from __future__ import annotations

import signal

_received = False


def _handle(signum, frame):
    global _received
    _received = True
    raise KeyboardInterrupt


def install() -> None:
    """SIGINT raises KeyboardInterrupt, as Python's default handler does, and is recorded (main thread only)."""
    signal.signal(signal.SIGINT, _handle)


def take() -> bool:
    """Whether a SIGINT arrived since the last call; the record is cleared."""
    global _received
    got, _received = _received, False
    return got
