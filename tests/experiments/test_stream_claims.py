"""The residual-stream papers' claims (experiments/stream_claims.py): each rule on hand-made runs whose answer
is known: a speed-up in steps from the loss curves, mHC's gain bound from the stream probes, ResFormer's
smaller model against Pre-LN from the comparison."""

import json
from types import SimpleNamespace

import pytest

from blocklab.experiments import stream_claims as sc
from blocklab.training.rundir import STREAM_PROBES


def write_curve(run, losses, every=5):
    run.mkdir(parents=True)
    rows = [{"step": every * (i + 1), "loss": v} for i, v in enumerate(losses)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_training_curve_is_a_trailing_mean_and_skips_bad_lines(tmp_path):
    write_curve(tmp_path / "r", [10.0, 8.0, 6.0, 4.0, 2.0, 0.0])
    with open(tmp_path / "r" / "metrics.jsonl", "a") as f:
        f.write('{"step": 40, "eval_loss": 1}\n{"half')
    curve = sc.training_curve(tmp_path / "r")
    assert [s for s, _ in curve] == [5, 10, 15, 20, 25, 30]
    assert curve[1][1] == pytest.approx(9.0)  # the mean so far at the start
    assert curve[5][1] == pytest.approx((8 + 6 + 4 + 2 + 0) / 5)
    assert sc.training_curve(tmp_path / "missing") == []


def test_speedup_is_the_reference_steps_over_the_first_step_at_its_level():
    curve = [(10, 5.0), (20, 4.0), (30, 3.0), (40, 2.9)]
    assert sc.steps_to(curve, 3.0) == 30
    assert sc.speedup(curve, 3.0, 60) == pytest.approx(2.0)
    assert sc.speedup(curve, 1.0, 60) == pytest.approx(1.5)  # never reached: its last step, a bound


def result_with(groups, comparisons=None, cap=7.0, tolerance=0.02):
    base = {"label": "", "mean": 4.0, "best_at_edge": False, "n_params": 1000}
    return {
        "reference": "pre",
        "cap": cap,
        "tolerance": tolerance,
        "groups": {n: base | {"label": n} | g for n, g in groups.items()},
        "comparisons": comparisons or {},
    }


def curves(tmp_path, name, seeds_losses):
    return [write_curve(tmp_path / f"{name}{i}", ls) or tmp_path / f"{name}{i}" for i, ls in enumerate(seeds_losses)]


# Pre-LN's final trailing loss is 4.0, first reached at step 275 (five values of 4.0), not at its last, 300
REF = [[6.0] * 50 + [4.0] * 10] * 3


@pytest.mark.parametrize(
    "reach, status",
    [
        ([12, 13, 14], "holds"),  # 275 / 5 (k + 5): 2.9x to 3.2x
        ([45, 50, 48], "does not hold"),  # about 1.2x: the interval ends below 1.8
        ([12, 58, 30], "inconclusive"),  # spread too wide to say
    ],
)
def test_hyper_connections_speedup_claim(tmp_path, reach, status):
    runs = {
        "pre": curves(tmp_path, "pre", REF),
        "hc": curves(tmp_path, "hc", [[6.0] * k + [3.9] * (60 - k) for k in reach]),
    }
    claim = sc._speedup_claim("L4", result_with({"pre": {}, "hc": {}}), "hc", "pre", runs, sc.HC, 1.8, "1.8x faster")
    assert claim["status"] == status, claim["why"]
    assert claim["paper"] == sc.HC
    ups = [275 / min(5 * (k + 5), 300) for k in reach]  # a trailing mean of 5 reaches 4.0 at the 5th 3.9
    assert ", ".join(f"{u:.2f}x" for u in ups) in claim["why"]
    assert "(Pre-LN's own: 275)" in claim["why"]


def test_speedup_claim_is_inconclusive_at_the_grid_edge_or_at_the_cap(tmp_path):
    runs = {"pre": curves(tmp_path, "pre", REF), "hc": curves(tmp_path, "hc", [[3.0] * 60] * 3)}
    edge = result_with({"pre": {"best_at_edge": True}, "hc": {}})
    assert sc._speedup_claim("L4", edge, "hc", "pre", runs, sc.HC, 1.8, "x")["status"] == "inconclusive"
    capped = result_with({"pre": {}, "hc": {"mean": 7.0}})
    assert sc._speedup_claim("L4", capped, "hc", "pre", runs, sc.HC, 1.8, "x")["status"] == "inconclusive"
    assert (
        sc._speedup_claim("L4", result_with({"pre": {}, "hc": {}}), "hc", "pre", runs, sc.HC, 1.8, "x")["status"]
        == "holds"
    )


def write_gain(run, forward, backward):
    run.mkdir(parents=True)
    gain = {"composite_forward": forward, "composite_backward": backward}
    (run / STREAM_PROBES).write_text(json.dumps({"final": {"mixing": {"gain": gain}}}))
    return run


@pytest.mark.parametrize(
    "hc, mhc, status",
    [
        ([[1.0, 3.5], [1.0, 2.5]], [[1.0, 1.01], [1.0, 1.0]], "holds"),
        ([[1.0, 1.5], [1.0, 2.5]], [[1.0, 1.01], [1.0, 1.0]], "inconclusive"),  # HC's stayed bounded on a seed
        ([[1.0, 3.5], [1.0, 2.5]], [[1.0, 2.2], [1.0, 1.0]], "does not hold"),
    ],
)
def test_mhc_gain_claim(tmp_path, hc, mhc, status):
    runs = {
        "hc": [write_gain(tmp_path / f"hc{i}", f, [1.0]) for i, f in enumerate(hc)],
        "mhc": [write_gain(tmp_path / f"mhc{i}", [1.0], f) for i, f in enumerate(mhc)],  # the backward counts too
    }
    claim = sc._gain_claim("L4", result_with({"pre": {}, "hc": {}, "mhc": {}}), "hc", "mhc", runs)
    assert claim["status"] == status, claim["why"]
    assert f"{max(hc[0]):.3g}" in claim["why"]


def test_mhc_gain_claim_without_probes_is_inconclusive(tmp_path):
    runs = {"hc": [tmp_path / "a"], "mhc": [tmp_path / "b"]}
    assert sc._gain_claim("L4", result_with({"hc": {}, "mhc": {}}), "hc", "mhc", runs)["status"] == "inconclusive"


@pytest.mark.parametrize(
    "verdict, ci, status",
    [
        ("indistinguishable", [-0.05, 0.01], "holds"),
        ("indistinguishable", [-0.05, 0.08], "inconclusive"),
        ("worse", [0.03, 0.08], "does not hold"),
    ],
)
def test_resformer_claim_is_non_inferiority_with_fewer_parameters(verdict, ci, status):
    comp = {"small": {"difference": sum(ci) / 2, "ci95": ci, "p_holm": 0.5, "verdict": verdict}}
    result = result_with({"pre": {}, "small": {"n_params": 839}}, comp)
    claim = sc._resformer_claim("L4", result, "small", "pre")
    assert claim["status"] == status
    assert "16.1% fewer" in claim["claim"]


def test_stream_claims_pick_their_groups_by_block(tmp_path, monkeypatch):
    blocks = {
        "pre": "pre-ln",
        "hc": "hyper-connections",
        "mhc": "mhc",
        "vr": "value-residual",
        "small": "value-residual",
    }
    monkeypatch.setattr(sc, "resolved_blocks", lambda sweep, exp: blocks)
    sweep = SimpleNamespace(size_indices=lambda: [None])
    finals = []
    for n in blocks:
        for seed in range(2):
            finals.append(SimpleNamespace(name=f"{n}_s{seed}", group=n))
            write_curve(tmp_path / "runs" / f"{n}_s{seed}", [6 - 0.01 * i for i in range(60)])
    comp = {"small": {"difference": 0.0, "ci95": [-0.01, 0.01], "p_holm": 1.0, "verdict": "indistinguishable"}}
    result = result_with({n: {"n_params": 800 if n == "small" else 1000} for n in blocks}, comp)
    found = sc.stream_claims({"L4": result}, sweep, tmp_path, finals)
    assert [(c["paper"], c["group"]) for c in found] == [(sc.HC, "hc"), (sc.MHC, "mhc"), (sc.RESFORMER, "small")]
    assert found[0]["status"] == "does not hold"  # the same curve as Pre-LN: speed-up 1.0 on both seeds
    other = result | {"reference": "hc"}
    assert sc.stream_claims({"L4": other}, sweep, tmp_path, finals) == []  # only against Pre-LN
