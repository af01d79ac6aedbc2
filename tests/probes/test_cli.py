"""`blocklab probe` through blocklab.cli.probe: outputs on a tiny setting, one-line errors on bad input."""

import argparse
import json

import pytest

from blocklab.cli import probe
from blocklab.errors import UserError
from blocklab.probes import FIGURES

TINY = [
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--d-ff",
    "64",
    "--seq-len",
    "16",
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
    "--no-progress",
]


def parse(*argv):
    parser = argparse.ArgumentParser(prog="blocklab")
    probe.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["probe", *argv])


@pytest.mark.slow
def test_writes_probes_json_and_figures(tmp_path, capsys):
    out = tmp_path / "p"
    assert probe.run(parse("--out", str(out), "--blocks", "post-ln,sas-p", "--depths", "2,1", *TINY)) == 0
    r = json.loads((out / "probes.json").read_text())
    assert r["settings"]["blocks"] == ["post-ln", "sas-p", "softmax-noskip"]
    assert r["settings"]["depths"] == [1, 2] and r["settings"]["data"] == "random"
    for name in FIGURES.values():
        assert (out / name).stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "post-ln" in printed and "probes.json" in printed
    with pytest.raises(UserError, match="--overwrite"):
        probe.run(parse("--out", str(out), "--blocks", "post-ln", "--depths", "1", *TINY))
    assert (
        probe.run(
            parse("--out", str(out), "--blocks", "pre-ln", "--depths", "1", "--overwrite", "--no-ablation", *TINY)
        )
        == 0
    )
    assert json.loads((out / "probes.json").read_text())["settings"]["blocks"] == ["pre-ln"]


@pytest.mark.slow
def test_probes_run_on_normformer_olmo2_frac_connections_and_muddformer(tmp_path):
    out = tmp_path / "n"
    blocks = ["normformer", "olmo2", "frac-connections", "muddformer"]
    assert (
        probe.run(parse("--out", str(out), "--blocks", ",".join(blocks), "--depths", "1,2", "--no-ablation", *TINY))
        == 0
    )
    r = json.loads((out / "probes.json").read_text())
    assert r["settings"]["blocks"] == blocks
    for b in blocks:
        assert set(r["results"][b]) == {"1", "2"}
        assert all(0 < r["results"][b][depth]["loss"]["mean"] < 10 for depth in ("1", "2"))


@pytest.mark.slow
def test_mlm_with_random_data(tmp_path):
    out = tmp_path / "m"
    assert (
        probe.run(parse("--out", str(out), "--blocks", "sas", "--depths", "2", "--task", "mlm", "--no-ablation", *TINY))
        == 0
    )
    r = json.loads((out / "probes.json").read_text())
    assert r["settings"]["model"]["task"] == "mlm" and r["results"]["sas"]["2"]["loss"]["mean"] > 0


@pytest.mark.parametrize(
    "bad, match",
    [
        (["--blocks", "pre-ln,nope"], "unknown block 'nope'"),
        (["--blocks", ","], "names no block"),
        (["--depths", "2,x"], "'x' is not a positive integer"),
        (["--depths", "0,4"], "'0' is not a positive integer"),
        (["--depths", ""], "names no depth"),
        (["--n-heads", "5"], "n_heads"),
        (["--seeds", "0"], "--seeds"),
        (["--data", "/no/such/corpus.txt", "--vocab-size", "512"], "/no/such/corpus.txt"),
    ],
)
def test_bad_input_is_a_user_error(tmp_path, bad, match):
    args = parse("--out", str(tmp_path / "o"), *TINY, *bad)
    with pytest.raises(UserError, match=match) as e:
        probe.run(args)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "o" / "probes.json").exists()


def test_out_must_be_a_folder(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        probe.run(parse("--out", str(f), *TINY))


def test_help_explains_every_option_with_defaults():
    parser = argparse.ArgumentParser(prog="blocklab")
    sub = parser.add_subparsers(dest="command")
    probe.add_parser(sub)
    text = " ".join(sub.choices["probe"].format_help().split())
    for option in (
        "--blocks",
        "--depths",
        "--seeds",
        "--batches",
        "--data",
        "--ablation",
        "--init",
        "--norm",
        "--task",
        "--d-model",
        "--overwrite",
    ):
        assert option in text
    assert "2,4,8,16,32" in text and "post-ln,pre-ln,sas,sas-p" in text and "(default: stdlib)" in text
    assert "(default: 2,4,8,16,32)" in text and "(default: normal)" in text and "None" not in text
