"""`blocklab check`'s competitors of the fused kernel: the sdpa path compiled, SDPA pinned to one backend each.

They appear in the table with their correctness; each shaped path's time is also given over plain causal
SDPA's (the yardstick); backends this device lacks are listed with the reason; the recommendation names
the fastest correct shaped path per range of T and never a wrong one. Compiled with dynamo's aot_eager
backend (no code generation: seconds) except in the one slow test that runs inductor."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from blocklab.attention import centring, modules
from blocklab.bench import check, check_paths
from blocklab.bench.check_paths import PATHS, YARDSTICK, Path, make_inputs, shaped_sdpa
from blocklab.bench.check_report import auto_line, recommend, render_text
from blocklab.cli import main

COMPETITORS = [f"sdpa-compiled:{b}" for b in ("flash", "cudnn", "efficient", "math")]


@pytest.fixture(autouse=True)
def small(monkeypatch):
    """One torch thread, the check at T=17 only, and the competitors compiled without code generation."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(check, "CHECK_T", (17,))
    monkeypatch.setattr(check_paths, "COMPILE_BACKEND", "aot_eager")
    yield
    torch.set_num_threads(before)


def tiny(paths, **kw):
    return check.run_check("cpu", shapes=(32,), reps=1, warmup=0, paths=paths, **kw)


@pytest.fixture(scope="module")
def result():
    """One check of sdpa, the four competitors and the yardstick on CPU, shared by the tests that read it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(check, "CHECK_T", (17,))
        mp.setattr(check_paths, "COMPILE_BACKEND", "aot_eager")
        return tiny(["sdpa", *COMPETITORS, YARDSTICK])


def test_competitors_appear_in_the_table_with_their_correctness(result):
    assert result["ok"]
    for name in ("sdpa-compiled:flash", "sdpa-compiled:math"):
        entry = result["paths"][name]
        assert entry["status"] == "correct" and entry["compiled"], entry.get("reason")
        assert entry["backend"] == name.split(":")[1] and entry["impl"] is None  # not an attn_impl value yet
        # CPU: checked in the timed dtype (fp32) at the largest check T, causal and padded, every gradient
        records = entry["correctness"]["records"]
        assert {(r["dtype"], r["T"], r["case"]) for r in records} == {
            ("float32", 17, "causal"),
            ("float32", 17, "padded"),
        }
        assert set(records[0]["errors"]) == {
            "out",
            "grad q",
            "grad k",
            "grad v",
            "grad alpha",
            "grad beta",
            "grad gamma",
        }
        assert max(e for r in records for e in r["errors"].values()) < 1e-5
        assert entry["speed"]["32"]["ms"] > 0 and entry["verdict"].startswith(f"{name}: correct (max rel err fp32 fwd ")
    text = render_text(result)
    table = text.split("\ntime / plain causal SDPA's")[0].splitlines()
    rows = {line.split()[0]: line for line in table if line.startswith("sdpa-compiled:")}
    assert rows["sdpa-compiled:flash"].split()[1] == "ok" and rows["sdpa-compiled:math"].split()[1] == "ok"
    assert "sdpa-compiled:<backend>: the sdpa path under torch.compile" in text


def test_the_yardstick_is_plain_causal_sdpa_and_each_shaped_time_is_divided_by_it(result):
    inputs = make_inputs(2, 3, 32, 16, torch.float32, "cpu", padded=False)
    q, k, v = (t.detach() for t in inputs.args("softmax"))
    assert torch.equal(
        PATHS[YARDSTICK].fn(q, k, v, True, None), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )
    yard = result["paths"][YARDSTICK]["speed"]["32"]["ms"]
    lines = render_text(result).splitlines()
    block = lines[next(i for i, ln in enumerate(lines) if ln.startswith("time / plain causal SDPA's")) :]
    for name in ("sdpa", "sdpa-compiled:flash", "sdpa-compiled:math"):
        s = result["paths"][name]["speed"]["32"]
        assert s["vs_yardstick"] == pytest.approx(s["ms"] / yard)
        assert next(ln for ln in block if ln.startswith(name + " ")).split()[1] == f"{s['vs_yardstick']:.2f}"
        assert f"time / plain causal SDPA's: T=32 {s['vs_yardstick']:.2f}" in result["paths"][name]["verdict"]
    assert "vs_yardstick" not in result["paths"][YARDSTICK]["speed"]["32"]  # softmax paths are not shaped
    assert result["timing"]["32"]["sdpa_backend"] == "flash"  # what SDPA's own dispatch runs on CPU


def test_backends_the_device_lacks_are_listed_with_the_reason(result):
    text = render_text(result)
    for backend in ("cudnn", "efficient"):
        name = f"sdpa-compiled:{backend}"
        entry = result["paths"][name]
        assert entry["status"] == "unavailable" and f"no {backend} kernel on CPU" in entry["reason"]
        assert entry["verdict"] == f"{name}: unavailable: {entry['reason']}"
        row = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
        mark = row.split()[2]  # "unavailable [n]": the footnote under the table gives the reason
        assert row.split()[1] == "unavailable" and f"{mark} {name}: no {backend} kernel on CPU" in text


def test_cases_a_backend_has_no_kernel_for_are_skipped_with_the_reason_not_failed(monkeypatch):
    def no_mask(device, dtype, T, D, causal, key_mask):
        return None if key_mask is None else "no flash kernel: attn_mask is not supported"

    monkeypatch.setitem(PATHS, "partial", Path("partial", "shaped", shaped_sdpa, "sdpa", False, supports=no_mask))
    entry = tiny(["partial", "sdpa"])["paths"]["partial"]
    assert entry["status"] == "correct"
    assert entry["unsupported"] == ("float32 padded, bfloat16 padded: no flash kernel: attn_mask is not supported")
    assert entry["verdict"].endswith("; no kernel for " + entry["unsupported"])
    assert {r["case"] for r in entry["correctness"]["records"] if "errors" in r} == {"causal"}

    def nothing(device, dtype, T, D, causal, key_mask):
        return "no flash kernel: fp32 is not supported"

    monkeypatch.setitem(PATHS, "partial", Path("partial", "shaped", shaped_sdpa, "sdpa", False, supports=nothing))
    result = tiny(["partial", "sdpa"])
    assert result["paths"]["partial"]["status"] == "unavailable"  # no kernel for the timed case
    assert "partial" not in result["recommendation"]["line"] and result["ok"]


def test_the_pinned_backend_is_the_one_sdpa_runs():
    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    inputs = make_inputs(1, 2, 16, 16, torch.float32, "cpu", padded=False)
    for backend, op in (("flash", "_scaled_dot_product_flash_attention_for_cpu"), ("math", "bmm")):
        mode = Ops()
        mode.seen = set()
        with mode:
            check_paths._pinned(backend)(*inputs.args("shaped"), True, None)
        assert op in mode.seen
        assert ("_scaled_dot_product_flash_attention_for_cpu" in mode.seen) == (backend == "flash")


def speeds(**ms):
    return {str(T): {"ms": t} for T, t in ms.items()}


def test_the_recommendation_is_the_fastest_correct_path_per_range_of_T():
    def shaped(times, status="correct", **kw):
        return {"kind": "shaped", "status": status, "speed": {str(T): {"ms": t} for T, t in times.items()}, **kw}

    paths = {
        "sdpa": shaped({128: 2.0, 1024: 3.0, 4096: 6.0}, impl="sdpa"),
        "fused": shaped({128: 1.6, 1024: 1.8, 4096: 3.0}, impl="fused"),
        "sdpa-compiled:flash": shaped({128: 1.0, 1024: 2.0}, impl=None, backend="flash", compiled=True),
        "materialized": shaped({128: 2.5, 1024: 13.0}, impl="materialized"),
        "mha-sdpa": {"kind": "softmax", "status": "correct", "speed": {"128": {"ms": 0.1}}},  # not shaped
    }
    rec = recommend(paths, [128, 1024, 4096])
    assert [(r["path"], r["T"]) for r in rec["ranges"]] == [("sdpa-compiled:flash", [128]), ("fused", [1024, 4096])]
    assert rec["per_shape"]["128"] == {
        "path": "sdpa-compiled:flash",
        "impl": None,
        "backend": "flash",
        "ms": 1.0,
        "next": {"path": "fused", "ms": 1.6, "speedup": 1.6},
        "tie": False,
    }
    assert rec["per_shape"]["4096"]["impl"] == "fused" and rec["per_shape"]["4096"]["next"]["path"] == "sdpa"
    assert rec["line"] == (
        "fastest correct shaped path: T=128: sdpa-compiled:flash (1.60x fused); "
        "T=1024-4096: fused (1.11x sdpa-compiled:flash, 2.00x sdpa)"
    )
    # auto (fused on CUDA) is compared with attn_impl paths only: the faster compiled competitor is the
    # recommendation's business, not a warning that auto is misconfigured
    assert auto_line("cuda", paths, [128, 1024, 4096]) == (
        'attn_impl="auto" on cuda (bf16) runs fused: correct, and no other attn_impl path is more than 10% '
        "faster at any timed shape",
        False,
    )
    # a win by less than 5% is a tie, and said to be
    paths["sdpa-compiled:flash"]["speed"]["128"]["ms"] = 1.55
    rec = recommend(paths, [128, 1024, 4096])
    assert rec["per_shape"]["128"]["tie"] and not rec["per_shape"]["1024"]["tie"]
    assert rec["line"].startswith(
        "fastest correct shaped path: T=128: sdpa-compiled:flash (1.03x fused: within 5%, a tie); "
    )
    # a range breaks where a shape has no timed candidate in between
    paths["fused"]["speed"].pop("1024")
    paths["sdpa-compiled:flash"]["speed"].pop("1024")
    rec = recommend(paths, [128, 1024, 4096])
    assert [(r["path"], r["T"]) for r in rec["ranges"]] == [
        ("sdpa-compiled:flash", [128]),
        ("sdpa", [1024]),
        ("fused", [4096]),
    ]


def test_a_wrong_or_unavailable_path_is_never_recommended_however_fast():
    def shaped(ms, status="correct"):
        return {"kind": "shaped", "status": status, "speed": {"128": {"ms": ms}}}

    paths = {"sdpa": shaped(2.0), "bad": shaped(0.1, "wrong"), "gone": shaped(0.05, "unavailable")}
    assert recommend(paths, [128])["per_shape"]["128"]["path"] == "sdpa"
    assert recommend(paths, [128])["line"] == "fastest correct shaped path: T=128: sdpa (alone)"
    paths["sdpa"]["status"] = "wrong"
    assert recommend(paths, [128]) == {"per_shape": {}, "ranges": [], "line": "fastest correct shaped path: none timed"}


def test_an_injected_wrong_competitor_is_caught_timed_and_not_picked(monkeypatch):
    """alpha V + beta Q + gamma K: cheap, and wrong. The check times it, fastest (the clock is made to say
    so: a shared machine's timings are no ground for a test), and passes it over."""

    def elementwise(q, k, v, a, b, g, causal, key_mask):
        return a.view(1, -1, 1, 1) * v + b.view(1, -1, 1, 1) * q + g.view(1, -1, 1, 1) * k

    def clock(step, device):
        step()  # the step closes over its path as a default argument
        return 1e-6 if step.__defaults__[0].name == "cheap" else 1e-3

    monkeypatch.setitem(PATHS, "cheap", Path("cheap", "shaped", elementwise, "sdpa", False, compiled=True))
    monkeypatch.setattr(check, "time_step", clock)
    result = tiny(["sdpa", "cheap", "sdpa-compiled:flash"])
    cheap = result["paths"]["cheap"]
    assert cheap["status"] == "wrong" and not result["ok"]
    assert cheap["speed"]["32"]["ms"] == pytest.approx(1e-3) and cheap["speed"]["32"]["speedup"] == pytest.approx(1e3)
    assert result["recommendation"]["per_shape"]["32"]["path"] in ("sdpa", "sdpa-compiled:flash")
    assert "cheap" not in result["recommendation"]["line"]


def test_a_broken_epilogue_makes_the_compiled_competitor_wrong(monkeypatch):
    """The compiled graph is the sdpa path's code: a bug there is found in the competitor too (dynamo
    guards on the functions it traced, so the patched one is recompiled, not served from the cache)."""
    real = centring.centred_mean
    monkeypatch.setattr(modules, "centred_mean", lambda v, causal, key_mask=None: real(v, causal, key_mask) * 1.05)
    entry = tiny(["sdpa-compiled:flash"])["paths"]["sdpa-compiled:flash"]
    assert entry["status"] == "wrong" and entry["verdict"].startswith("sdpa-compiled:flash: WRONG: ")


def test_cli_no_compiled_leaves_them_out(monkeypatch, capsys):
    monkeypatch.setattr(check, "PATHS", {n: PATHS[n] for n in ("sdpa", "sdpa-compiled:flash")})
    assert main(["check", "--device", "cpu", "--shapes", "16", "--reps", "1", "--no-compiled"]) == 0
    out = capsys.readouterr().out
    assert "sdpa-compiled:flash" not in out and "not run: --no-compiled" in out


@pytest.mark.slow
def test_inductor_compiles_the_competitor_on_cpu(monkeypatch):
    """The real thing: inductor, fullgraph, the backend pinned inside the graph; checked and timed."""
    monkeypatch.setattr(check_paths, "COMPILE_BACKEND", "inductor")
    result = tiny(["sdpa-compiled:flash", "sdpa", YARDSTICK])
    entry = result["paths"]["sdpa-compiled:flash"]
    assert entry["status"] == "correct", entry.get("reason")
    assert entry["max_err"]["float32"]["grads"] < 1e-5 and entry["speed"]["32"]["vs_yardstick"] > 0
