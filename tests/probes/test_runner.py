"""blocklab.probes.runner: `blocklab probe`'s options and work as a library (a sweep's [probes] table runs them)."""

import json

import pytest

from blocklab.errors import UserError
from blocklab.probes.runner import parse_options, run_options

TINY = [
    "--d-model",
    "16",
    "--n-heads",
    "2",
    "--d-ff",
    "32",
    "--seq-len",
    "8",
    "--batch-size",
    "2",
    "--vocab-size",
    "64",
    "--seeds",
    "1",
    "--batches",
    "1",
    "--data",
    "random",
    "--no-ablation",
    "--no-progress",
]


def test_options_have_the_commands_defaults():
    args = parse_options(["--out", "o"])
    assert (args.blocks, args.depths, args.seeds, args.data, args.ablation) == (
        "post-ln,pre-ln,sas,sas-p",
        "2,4,8,16,32",
        3,
        "stdlib",
        True,
    )


@pytest.mark.slow
def test_run_options_writes_probes_json(tmp_path, capsys):
    out = tmp_path / "p"
    assert run_options(["--out", str(out), "--blocks", "pre-ln", "--depths", "1", "--task", "mlm", *TINY]) == 0
    r = json.loads((out / "probes.json").read_text())
    assert r["settings"]["blocks"] == ["pre-ln"] and r["settings"]["model"]["task"] == "mlm"
    assert "probes.json" in capsys.readouterr().out


def test_bad_options_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="'0' is not a positive integer"):
        run_options(["--out", str(tmp_path / "p"), "--depths", "0", *TINY])
    with pytest.raises(SystemExit):  # an unknown option: argparse's usage line, as `blocklab probe` gives
        parse_options(["--out", "o", "--no-such-option"])
