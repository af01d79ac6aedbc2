"""blocklab/interrupts.py: a Ctrl-C swallowed by code that catches every exception is still honoured, by the
command line (exit 130, one line) and by the training loop (it stops at its next step, checkpoint saved)."""

import argparse
import os
import signal

import pytest

from blocklab import interrupts
from blocklab.cli import main
from blocklab.training.stopping import SignalFlag


@pytest.fixture
def handler():
    old = signal.getsignal(signal.SIGINT)
    interrupts.install()
    interrupts.take()
    yield
    signal.signal(signal.SIGINT, old)
    interrupts.take()


def swallowed_ctrl_c():
    """A SIGINT to this process while a library's `except BaseException: pass` runs."""
    try:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs before kill returns to Python
    except BaseException:  # noqa: BLE001 - what the libraries that lose a Ctrl-C do
        pass


def test_the_handler_raises_and_records(handler):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert interrupts.take() and not interrupts.take()  # recorded once, then cleared


def test_a_swallowed_ctrl_c_stops_the_training_loop_at_its_next_check(handler):
    swallowed_ctrl_c()
    with SignalFlag() as flag:
        assert flag.raised
    with SignalFlag() as flag:
        assert not flag.raised  # taken once


def test_a_swallowed_ctrl_c_makes_the_command_exit_130_with_one_line(handler, capsys, monkeypatch, tmp_path):
    import blocklab.cli as cli

    calls = []

    def command(args):
        if not calls:  # the first run gets a Ctrl-C that a library swallows, the second none
            swallowed_ctrl_c()
        calls.append(1)
        return 0

    class Parser:  # a command line whose one command is `command`
        def parse_args(self, rest):
            return argparse.Namespace(command="report", func=command)

    monkeypatch.setattr(cli, "build_parser", lambda name: Parser())
    assert main(["report", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["blocklab report: interrupted"]
    assert main(["report", str(tmp_path)]) == 0  # the record was taken: the next command is not interrupted


def test_a_command_that_saw_the_ctrl_c_says_so_alone(handler, capsys, monkeypatch):
    """A command that handled the interrupt itself (compare's workers, the training loop) exits 130 with its own
    words: the command line adds no second line."""
    import blocklab.cli as cli

    def command(args):
        swallowed_ctrl_c()
        return 130

    class Parser:
        def parse_args(self, rest):
            return argparse.Namespace(command="compare", func=command)

    monkeypatch.setattr(cli, "build_parser", lambda name: Parser())
    assert main(["compare"]) == 130
    assert capsys.readouterr().err == "" and not interrupts.take()
