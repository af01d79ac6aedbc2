"""`blocklab check`: correct paths pass, broken ones are reported WRONG (forward or gradient alone),
unavailable ones are named, and the command's exit status and refusals. Tiny shapes, no timed assertions."""

import json

import pytest
import torch

from blocklab.attention import centring, modules
from blocklab.bench import check
from blocklab.bench.check_paths import PATHS, Path
from blocklab.cli import main

REFERENCE_PATHS = ["sdpa", "materialized", "mha-sdpa", "mha-materialized"]


@pytest.fixture(autouse=True)
def small(monkeypatch):
    """One torch thread (the machine is shared) and the check at T=17 only: seconds, not minutes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(check, "CHECK_T", (17,))
    yield
    torch.set_num_threads(before)


def tiny(paths=REFERENCE_PATHS, **kw):
    return check.run_check("cpu", shapes=(32,), reps=1, warmup=0, paths=paths, **kw)


def test_sdpa_and_materialized_are_correct_on_cpu_and_timed():
    result = tiny()
    assert result["ok"] and result["dtypes"] == ["float32", "bfloat16"]
    for name in REFERENCE_PATHS:
        entry = result["paths"][name]
        assert entry["status"] == "correct", entry.get("reason")
        assert entry["verdict"].startswith(f"{name}: correct (max rel err fp32 fwd ")
        records = entry["correctness"]["records"]
        assert {(r["dtype"], r["case"]) for r in records} == {
            (d, c) for d in ("float32", "bfloat16") for c in ("causal", "padded")
        }
        grads = {k for r in records for k in r["errors"]} - {"out"}
        assert grads == (
            {"grad q", "grad k", "grad v", "grad alpha", "grad beta", "grad gamma"}
            if entry["kind"] == "shaped"
            else {"grad q", "grad k", "grad v"}
        )
        fp32 = [e for r in records if r["dtype"] == "float32" for e in r["errors"].values()]
        assert max(fp32) < 1e-5  # far inside the tolerance: the reference and the inputs are the same values
        assert entry["speed"]["32"]["ms"] > 0
    assert result["paths"]["materialized"]["speed"]["32"]["speedup"] > 0
    assert 'attn_impl="auto" on cpu (bf16) runs sdpa' in result["auto"]["line"]


def test_a_wrong_forward_is_reported_with_its_case(monkeypatch):
    real = centring.centred_mean
    monkeypatch.setattr(modules, "centred_mean", lambda v, causal, key_mask=None: real(v, causal, key_mask) * 1.05)
    result = tiny(["sdpa", "materialized"])
    sdpa = result["paths"]["sdpa"]
    assert not result["ok"] and sdpa["status"] == "wrong"
    assert sdpa["verdict"].startswith("sdpa: WRONG: ") and "> 0.0001 (float32, T=17, " in sdpa["verdict"]
    assert result["paths"]["materialized"]["status"] == "correct"  # it forms C, not the running mean
    assert "WARNING" in result["auto"]["line"]  # auto runs sdpa on CPU


def test_a_wrong_gradient_alone_is_caught(monkeypatch):
    """The forward is exact; only dL/dk is scaled by 1.5. Only a gradient comparison sees it."""
    real = modules.softmax_attention

    def grad_k_off(q, k, v, causal, key_mask=None, impl="sdpa"):
        return real(q, 1.5 * k - 0.5 * k.detach(), v, causal, key_mask, impl)

    monkeypatch.setattr(modules, "softmax_attention", grad_k_off)
    result = tiny(["sdpa", "materialized"])
    sdpa = result["paths"]["sdpa"]
    assert sdpa["status"] == "wrong" and sdpa["reason"].startswith("grad k rel err")
    assert max(r["errors"]["out"] for r in sdpa["correctness"]["records"]) < 1e-2
    assert result["paths"]["materialized"]["status"] == "correct"


def test_a_crashing_path_is_wrong_not_a_crash(monkeypatch):
    def boom(*args):
        raise RuntimeError("no kernel image is available\nsecond line")

    monkeypatch.setitem(PATHS, "sdpa", Path("sdpa", "shaped", boom, "sdpa", False))
    result = tiny(["sdpa", "materialized"])
    assert result["paths"]["sdpa"]["verdict"] == (
        "sdpa: WRONG: raised RuntimeError: no kernel image is available (float32, T=17, causal)"
    )


def test_fused_is_unavailable_with_its_reason_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = tiny(["fused", "sdpa"])
    fused = result["paths"]["fused"]
    assert fused["status"] == "unavailable" and result["ok"]
    assert fused["verdict"].startswith("fused: unavailable: ") and "fused" not in result["timing"]["32"]


@pytest.mark.skipif(
    torch.cuda.is_available() or check.PATHS["fused"].unavailable(torch.device("cpu")) is not None,
    reason="the fused kernel through Triton's interpreter (CPU, TRITON_INTERPRET=1, triton installed)",
)
@pytest.mark.slow
def test_fused_under_the_interpreter_is_checked_at_small_T_and_not_timed():
    result = tiny(["fused", "sdpa"], check_T=(17, 300))
    fused = result["paths"]["fused"]
    assert fused["status"] == "correct", fused.get("reason")
    assert {(r["T"], r["dtype"]) for r in fused["correctness"]["records"]} == {(17, "float32")}
    assert "Triton interpreter" in fused["verdict"]
    assert fused["speed"]["32"] == {"skipped": "interpreter"}


def test_auto_warns_when_another_correct_path_is_faster():
    speed = lambda ms: {"32": {"ms": ms}}  # noqa: E731
    paths = {
        "sdpa": {"kind": "shaped", "status": "correct", "speed": speed(10.0)},
        "materialized": {"kind": "shaped", "status": "correct", "speed": speed(5.0)},
        "mha-sdpa": {"kind": "softmax", "status": "correct", "speed": speed(1.0)},
    }
    line, warns = check.auto_line("cpu", paths, [32])
    assert warns and "slower than materialized at T=32 (2.00x)" in line
    paths["materialized"]["speed"] = speed(9.5)  # within 10%: no warning
    assert check.auto_line("cpu", paths, [32])[1] is False


# The command: exit status, stdout/stderr, refusals.


def test_cli_exit_1_and_a_table_when_a_path_is_wrong(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(check, "PATHS", {n: PATHS[n] for n in ("sdpa", "materialized")})
    real = centring.centred_mean
    monkeypatch.setattr(modules, "centred_mean", lambda v, causal, key_mask=None: real(v, causal, key_mask) + 0.1)
    out = tmp_path / "check.json"
    assert main(["check", "--device", "cpu", "--shapes", "16", "--reps", "1", "--json", str(out)]) == 1
    cap = capsys.readouterr()
    assert "sdpa: WRONG: " in cap.out and "FAILED: wrong on this machine: sdpa" in cap.out
    assert "T=16 ms" in cap.out and "blocklab check: " in cap.err  # progress on stderr
    assert json.loads(out.read_text())["paths"]["materialized"]["status"] == "correct"


def test_cli_exit_0_when_every_path_is_correct(monkeypatch, capsys):
    monkeypatch.setattr(check, "PATHS", {n: PATHS[n] for n in ("sdpa", "mha-sdpa")})
    assert main(["check", "--device", "cpu", "--shapes", "16", "--reps", "1"]) == 0
    assert "all available paths agree with the reference" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cli_cuda_without_a_gpu_is_one_line(capsys):
    assert main(["check", "--device", "cuda"]) != 0
    cap = capsys.readouterr()
    assert cap.out == "" and "Traceback" not in cap.err
    assert cap.err.count("\n") == 1 and "no CUDA device" in cap.err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--shapes", "12x"], "--shapes '12x' is not an integer"),
        (["--shapes", ","], "--shapes is empty"),
        (["--reps", "0"], "--reps must be at least 1"),
        (["--device", "tpu"], "--device 'tpu' is not valid"),
    ],
)
def test_cli_bad_options_are_one_line(argv, message, capsys):
    assert main(["check", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for word in ("--device", "--shapes", "--reps", "--json", "materialized", "fused", "Exit status"):
        assert word in text
