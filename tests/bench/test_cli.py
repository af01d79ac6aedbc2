"""`blocklab bench` end to end at a tiny shape, its table and JSON, and its refusals. No timed assertions."""

import argparse
import json

import pytest
import torch

from blocklab.bench import runner
from blocklab.cli import bench as cli
from blocklab.errors import UserError

TINY = "d=32,heads=4,ff=64,T=16,layers=2,vocab=64,batch=2"
ROW_FIELDS = {
    "label",
    "block",
    "precision",
    "compile",
    "attn_impl",
    "params",
    "step_flops",
    "timing",
    "tokens_per_s",
    "mfu",
    "peak_memory_bytes",
    "achieved_flops_per_s",
}


def parse(*argv):
    parser = argparse.ArgumentParser(prog="blocklab")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def run(*argv):
    return cli.run(parse(*argv), list(argv))


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: the tests share two cores with other work (and --threads changes the global)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fake_memory(monkeypatch):
    """Stand-in for the per-variant memory processes (the worker has its own test)."""
    monkeypatch.setattr(
        runner, "variant_memory", lambda shape, v, device, adamw: {"peak_bytes": 1000 + len(v.block), "method": "fake"}
    )


@pytest.mark.slow
def test_cli_runs_a_tiny_shape_end_to_end_and_writes_json(tmp_path, capsys, fake_memory):
    out = tmp_path / "bench.json"
    assert (
        run(
            "--blocks",
            "pre-ln,sas,sas-p",
            "--shape",
            TINY,
            "--reps",
            "2",
            "--warmup",
            "1",
            "--peak-size",
            "64",
            "--device",
            "cpu",
            "--json",
            str(out),
        )
        == 0
    )
    stdout = capsys.readouterr().out
    for block in ("pre-ln", "sas", "sas-p"):
        assert f"{block} fp32 eager" in stdout
    assert "FLOPs ceiling" in stdout and "MFU" in stdout
    result = json.loads(out.read_text())
    assert [r["block"] for r in result["rows"]] == ["pre-ln", "sas", "sas-p"]
    for r in result["rows"]:
        assert ROW_FIELDS <= set(r)
        assert r["timing"]["n"] == 2 and len(r["timing"]["times_s"]) == 2
        assert {"median_s", "q1_s", "q3_s", "iqr_s", "min_s", "max_s"} <= set(r["timing"])
        assert r["tokens_per_s"] > 0 and r["mfu"] > 0 and r["peak_memory_bytes"] > 0
    by = {r["block"]: r for r in result["rows"]}
    assert "vs_reference" not in by["pre-ln"]
    vs = by["sas-p"]["vs_reference"]
    assert vs["flops_ceiling"] == pytest.approx(by["pre-ln"]["step_flops"] / by["sas-p"]["step_flops"])
    assert vs["fraction_of_ceiling"] == pytest.approx(vs["speedup"] / vs["flops_ceiling"])
    assert set(result["peak"]) == {"fp32"} and result["peak"]["fp32"]["flops_per_s"] > 0
    assert result["machine"]["torch"] == torch.__version__
    assert result["config"]["command"].startswith("blocklab bench --blocks pre-ln,sas,sas-p")


@pytest.mark.slow
def test_extra_variants_are_compared_with_their_fp32_eager_baseline(capsys, fake_memory):
    assert (
        run(
            "--blocks",
            "pre-ln,sas-p",
            "--shape",
            TINY,
            "--reps",
            "1",
            "--warmup",
            "0",
            "--peak-size",
            "32",
            "--device",
            "cpu",
            "--extra",
            "sas-p:bf16",
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert "sas-p bf16 eager" in stdout and "tokens/s speedup" in stdout


@pytest.mark.slow
def test_muon_and_adamw_are_timed_in_the_same_rounds(capsys, fake_memory):
    argv = ["--blocks", "pre-ln", "--shape", TINY, "--reps", "2", "--warmup", "1", "--peak-size", "32"]
    assert run(*argv, "--device", "cpu", "--optimizer", "muon", "--vs-adamw") == 0
    stdout = capsys.readouterr().out
    assert "pre-ln fp32 eager muon" in stdout and "step time vs AdamW" in stdout
    line = next(x for x in stdout.splitlines() if x.startswith("pre-ln fp32 eager muon  pre-ln fp32 eager"))
    assert line.split()[7].endswith("x") and line.endswith(" ms")  # the ratio, then the range and the difference


def test_help_documents_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option in (
        "--blocks",
        "--shape",
        "--precision",
        "--compile",
        "--reps",
        "--warmup",
        "--memory-scaling",
        "--json",
        "--device",
        "--extra",
        "--vs-fp32-eager",
        "--optimizer",
        "--vs-adamw",
    ):
        assert option in text
    assert "default: 5" in text and "pre-ln,sas,sas-p" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--blocks", "pre-ln,nope"], "unknown block 'nope'"),
        (["--blocks", "pre-ln,pre-ln"], "listed twice"),
        (["--blocks", ""], "--blocks is empty"),
        (["--shape", "d=768,wings=2"], "wings=2"),
        (["--shape", "d=abc"], "not an integer"),
        (["--shape", "d=100,heads=12"], "not divisible"),
        (["--shape", "T=0"], "must be positive"),
        (["--shape", "huge"], "unknown named shape"),
        (["--precision", "fp16", "--device", "cpu"], "fp16 is refused on CPU"),
        (["--precision", "fp8"], "choose one of"),
        (["--reps", "0"], "--reps 0 is not valid; it must be a positive integer"),
        (["--warmup", "-1"], "--warmup -1 is not valid; it must be an integer >= 0"),
        (["--peak-size", "8"], "--peak-size 8 is not valid; it must be an integer >= 16"),
        (["--warmup", "x"], "not an integer"),
        (["--attn-impl", "flash"], "--attn-impl"),
        (
            ["--memory-scaling", "512,-1"],
            "--memory-scaling '512,-1' is not valid; it must be a list of distinct positive",
        ),
        (["--scaling-impls", "sdpa,flash"], "--scaling-impls 'sdpa,flash' is not valid; it must be a non-empty list"),
        (["--extra", "sas-p:fast"], "'fast'"),
        (["--blocks", "sas-p", "--extra", "sas-p:fp32"], "listed twice"),
        (["--scaling-only"], "--scaling-only needs --memory-scaling"),
        (["--device", "tpu"], "--device 'tpu'"),
        (["--adamw", "sgd"], "--adamw 'sgd'"),
    ],
)
def test_bad_input_is_one_line_user_error(argv, message):
    with pytest.raises(UserError) as e:
        run(*argv)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_is_refused():
    with pytest.raises(UserError, match="no CUDA device"):
        run("--device", "cuda")


def test_unwritable_json_path_is_refused_before_benchmarking(tmp_path):
    with pytest.raises(UserError, match="--json"):
        run("--shape", TINY, "--json", str(tmp_path))  # a directory
