"""The benchmark's pieces: statistics, round-robin order, ratios, the memory worker and scaling."""

import pytest

from blocklab.bench import memory
from blocklab.bench.config import Shape, Variant
from blocklab.bench.report import render_text
from blocklab.bench.runner import add_ratios
from blocklab.bench.timing import interleaved, rotate, summarize

TINY = Shape(d_model=32, n_heads=4, d_ff=64, seq_len=16, n_layers=1, vocab_size=64, batch=1)


def test_summary_statistics():
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median_s"], s["min_s"], s["max_s"], s["q1_s"], s["q3_s"]) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert s["iqr_s"] == 2.0 and s["n"] == 5 and s["times_s"] == [4.0, 1.0, 3.0, 2.0, 5.0]
    assert summarize([2.0])["iqr_s"] == 0.0


@pytest.mark.slow
def test_variants_are_interleaved_with_rotating_order():
    calls = []
    steps = {n: (lambda n=n: calls.append(n)) for n in "abc"}
    times = interleaved(steps, "cpu", reps=3, warmup=1, steps_per_rep=2)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    assert calls[3:] == ["a", "a", "b", "b", "c", "c", "b", "b", "c", "c", "a", "a", "c", "c", "a", "a", "b", "b"]
    assert all(len(t) == 6 for t in times.values())
    assert rotate([1, 2, 3], 4) == [2, 3, 1]


def row(block, mode, tps, flops, mem=None):
    return {
        "label": f"{block} {mode}",
        "block": block,
        "mode": mode,
        "attn_impl": "sdpa",
        "tokens_per_s": tps,
        "step_flops": flops,
        "params": flops // 10,
        "peak_memory_bytes": mem,
    }


def test_ratios_against_the_reference_and_against_fp32_eager():
    rows = [
        row("pre-ln", "fp32 eager", 100.0, 117, 200),
        row("sas-p", "fp32 eager", 113.0, 100, 150),
        row("pre-ln", "bf16 compile", 250.0, 117),
        row("sas-p", "bf16 compile", 280.0, 100),
    ]
    add_ratios(rows, "pre-ln")
    vs = rows[1]["vs_reference"]
    assert vs["speedup"] == pytest.approx(1.13) and vs["flops_ceiling"] == pytest.approx(1.17)
    assert vs["fraction_of_ceiling"] == pytest.approx(1.13 / 1.17) and vs["memory_ratio"] == pytest.approx(0.75)
    assert rows[3]["vs_reference"]["reference"] == "pre-ln bf16 compile"
    assert rows[3]["vs_fp32_eager"]["speedup"] == pytest.approx(280 / 113)
    assert "vs_reference" not in rows[0] and "vs_fp32_eager" not in rows[1]


def test_muon_is_timed_against_adamw_round_by_round():
    rows = [row("pre-ln", "fp32 eager", 100.0, 117), row("pre-ln", "fp32 eager muon", 80.0, 117)]
    rows[0]["timing"] = {"median_s": 1.0, "times_s": [1.0, 2.0, 1.0]}
    rows[1]["timing"] = {"median_s": 1.25, "times_s": [1.25, 2.0, 1.5]}  # per round: 1.25, 1.0, 1.5
    add_ratios(rows, "pre-ln")
    vs = rows[1]["vs_adamw"]
    assert vs["baseline"] == "pre-ln fp32 eager" and vs["step_time_ratio"] == 1.25  # the rounds' median
    assert vs["ratio_range"] == [1.0, 1.5] and vs["extra_s"] == pytest.approx(0.25)
    assert "vs_adamw" not in rows[0] and "vs_reference" not in rows[1]  # no Muon reference: no ratio


def test_a_muon_step_steps_muon_and_adamw():
    from blocklab.bench.step import Trainer
    from blocklab.optimizers import MuonAdamW

    t = Trainer(TINY, Variant("pre-ln", optimizer="muon"), "cpu")
    before = [p.detach().clone() for p in t.model.parameters()]
    t.step()
    assert isinstance(t.optimizer, MuonAdamW)
    assert all(not p.equal(q) for p, q in zip(t.model.parameters(), before))


@pytest.mark.slow
def test_memory_worker_measures_a_training_step_in_a_fresh_process():
    res = memory.run_worker(TINY, Variant("sas-p"), "cpu", warmup=1, measure=1)
    assert "error" not in res, res
    assert res["peak_bytes"] > 0 and "RSS" in res["method"] and res["params"] > 0


@pytest.mark.slow
def test_memory_scaling_skips_what_would_not_fit(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda device: 1)  # nothing fits beyond the first T
    res = memory.memory_scaling(TINY, ["sas-p"], ["materialized"], [32, 16, 64], "cpu")
    rows = res["rows"]
    assert [r["T"] for r in rows] == [16, 32, 64]
    assert rows[0]["peak_bytes"] > 0
    assert rows[1]["skipped"].startswith("predicted") and rows[2]["skipped"] == rows[1]["skipped"]
    text = render_text(
        {
            "config": {},
            "machine": {
                "cpu": "x",
                "cpu_count": 1,
                "cpu_affinity": 1,
                "torch_threads": 1,
                "torch": "t",
                "device": "cpu",
            },
            "rows": [],
            "memory_scaling": res,
        }
    )
    assert "skipped" in text and "T=32,64" in text


def test_growth_exponents_tell_linear_from_quadratic_memory():
    rows = [
        {"block": "b", "attn_impl": impl, "T": T, "peak_bytes": 10_000 + (5 * T * T if impl == "mat" else 7 * T)}
        for impl in ("mat", "fused")
        for T in (512, 1024, 2048, 4096)
    ]
    fits = memory.growth_fits(rows)
    assert fits["b [mat]"]["increment_exponent"] == pytest.approx(2.0)
    assert fits["b [fused]"]["increment_exponent"] == pytest.approx(1.0)
    assert fits["b [fused]"]["T"] == [1024, 2048, 4096]
