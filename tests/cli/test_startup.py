"""The command line starts without torch: --help and argument errors answer at once, a Ctrl-C or an OSError
anywhere ends with one line, and the torch-free tables that --help reads agree with the library."""

import subprocess
import sys
from pathlib import Path

import pytest

from blocklab import cli
from blocklab.cli import COMMANDS, build_parser, main

NO_TORCH = r"""
import sys
from blocklab.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "triton", "numpy", "tokenizers") if m in sys.modules)
print("heavy:", ",".join(heavy) or "none", file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["nope"],
        ["train"],  # no --out: argparse's error
        ["train", "--help"],  # the block table and the recipes come from block_table.py
        ["train", "--out", "x", "--resume", "--overwrite"],
        ["generate", "--help"],
        ["finetune", "--help"],
        ["finetune", "--epochs", "x"],  # argparse's error
        ["compare", "--help"],
        ["bench", "--help"],
        ["check", "--help"],
        ["report", "--help"],
        ["probe", "--help"],
    ],
)
def test_help_and_argument_errors_import_no_torch(argv):
    p = subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=120)
    assert p.stderr.splitlines()[-1] == "heavy: none", p.stderr


REFUSED = r"""
import sys
from blocklab.cli import main
code = main(sys.argv[1:])
print("heavy:", ",".join(sorted(m for m in ("torch", "triton") if m in sys.modules)) or "none")
sys.exit(code)
"""


@pytest.mark.parametrize(
    "setting, line",
    [
        (["--model.block", "nosuch"], "block='nosuch' is not valid; choose one of: post-ln, pre-ln, parallel,"),
        (["--model.norm", "nosuch"], "norm='nosuch' is not valid; choose one of: rmsnorm, layernorm, dyt, derf"),
        (["--model.block", "ngpt", "--model.norm=nosuch"], "norm='nosuch' is not valid"),  # a block with a recipe
    ],
)
def test_a_bad_block_or_norm_is_refused_in_one_line_without_torch(tmp_path, setting, line):
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-c", REFUSED, "train", *setting, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == "heavy: none\n", p.stdout + p.stderr
    assert p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith(f"blocklab train: error: {line}")
    assert not out.exists()


def test_importing_the_package_and_the_cli_imports_no_torch():
    code = (
        "import sys, blocklab, blocklab.cli, blocklab.data, blocklab.training, blocklab.experiments;"
        "blocklab.cli.build_parser('');"
        "from blocklab.experiments.presets import PRESETS;"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stdout + p.stderr


def test_the_public_api_still_imports_and_the_registry_fills_itself():
    code = (
        "from blocklab.config import ModelConfig\n"
        "cfg = ModelConfig(block='sas-p')\n"  # validating the block loads the registry
        "from blocklab import ModelConfig as M, build_model, BLOCKS, ModelOutput, param_groups\n"
        "from blocklab.data import DataConfig, prepare, ClmBatches, IGNORE_INDEX\n"
        "assert M is ModelConfig and 'sas-p' in BLOCKS\n"
        "print(type(build_model(ModelConfig(block='sas', vocab_size=64, d_model=16, n_layers=1, n_heads=2,"
        " d_ff=32, max_seq_len=8))).__name__)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_unknown_names_are_attribute_errors():
    import blocklab
    import blocklab.data

    with pytest.raises(AttributeError):
        blocklab.nope  # noqa: B018
    with pytest.raises(AttributeError):
        blocklab.data.nope  # noqa: B018


def test_public_block_table_equals_the_registry():
    from blocklab.blocks import BLOCKS, REGISTRY
    from blocklab.registry import PUBLIC_BLOCKS

    assert PUBLIC_BLOCKS == {b: REGISTRY[b].label for b in BLOCKS}
    assert list(PUBLIC_BLOCKS) == list(BLOCKS)


def test_command_table_equals_each_modules_help():
    full = build_parser()
    sub = next(a for a in full._actions if a.dest == "command")
    assert {a.dest: a.help for a in sub._choices_actions} == COMMANDS


def test_every_subcommand_help_is_complete_when_built_alone(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "block recipes" in out and "sas-p" in out  # the callable epilog was computed for --help


def test_ctrl_c_during_start_up_is_one_line(monkeypatch, capsys):
    def interrupted(command):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["train", "--out", "x"]) == 130
    assert capsys.readouterr().err == "blocklab: interrupted\n"


def test_ctrl_c_in_a_command_is_one_line(monkeypatch, capsys):
    import blocklab.cli.report as report

    def run(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "run", run)
    assert main(["report", "somewhere"]) == 130
    assert capsys.readouterr().err == "blocklab report: interrupted\n"


@pytest.mark.parametrize(
    "error, line",
    [
        (PermissionError(13, "Permission denied", "/runs/a/metrics.jsonl"), "/runs/a/metrics.jsonl: Permission denied"),
        (OSError(28, "No space left on device", "/runs/a/ckpt"), "/runs/a/ckpt: No space left on device"),
        (NotADirectoryError(20, "Not a directory", "/runs/file/x"), "/runs/file/x: Not a directory"),
        (OSError(18, "Invalid cross-device link", "/a", None, "/b"), "/a -> /b: Invalid cross-device link"),
        (OSError("no path at all"), "no path at all"),
    ],
)
def test_an_os_error_that_escapes_a_command_is_one_line(monkeypatch, capsys, error, line):
    import blocklab.cli.report as report

    def run(args):
        raise error

    monkeypatch.setattr(report, "run", run)
    assert main(["report", "somewhere"]) == 1
    assert capsys.readouterr().err == f"blocklab report: error: {line}\n"


def test_a_real_os_error_from_a_process_is_one_line(tmp_path):
    # A file where the sweep folder should be: whatever check meets it first, the user gets one line.
    (tmp_path / "file").write_text("x")
    p = subprocess.run(
        [sys.executable, "-m", "blocklab", "report", str(tmp_path / "file" / "sub")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_ctrl_c_while_the_library_is_imported_is_one_line(tmp_path, overrides):
    import os
    import signal
    import time

    from tests.helpers import as_args

    p = subprocess.Popen(
        [sys.executable, "-m", "blocklab", "train", "--out", str(tmp_path / "r"), *as_args(overrides)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The signal goes once torch's library is mapped into the process: torch is being imported then (a fixed
    # sleep fired before Python's start on a loaded machine, or after the import on an idle one).
    maps = Path(f"/proc/{p.pid}/maps")
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        try:
            if "libtorch" in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.005)
    os.kill(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    # While torch loads the interrupt ends the command; one that a library swallowed there (blocklab/interrupts.py)
    # stops the training loop at its first step instead, with the loop's own line.
    assert (last.startswith("blocklab") and "interrupted" in last) or last.startswith("interrupted at step 1;"), err
