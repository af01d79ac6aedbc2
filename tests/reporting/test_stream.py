"""The residual-stream section (reporting/stream.py): hand-made RUN/stream_probes.json files whose means,
picked sub-layers, masked sources and caption numbers are worked out by hand below, checked in the figures
as drawn (the arrays on their axes) and in the captions."""

import json

import numpy as np
import pytest

from blocklab.reporting import build_report, generate_report
from blocklab.reporting import figures as F
from blocklab.reporting import stream as S
from blocklab.reporting import stream_data as SD
from blocklab.reporting.parts import Part
from blocklab.reporting.runs import family_order, load_runs
from blocklab.training.rundir import STREAM_PROBES
from tests.reporting.fakes import make_fake_sweep, write_run

HC_FWD = [1.0, 1.1, 1.2, 1.3, 1.5, 1.6, 1.7, 1.9, 1.8, 1.7, 1.6, 1.5]  # peak 1.9 at sub-layer 8 (mlp 4)


def mhc_residual(k, seed):
    a = 0.1 * (k + 1) + 0.05 * seed
    return [[1 - a, a], [a, 1 - a]]


def hc_residual(k):
    return (np.eye(5) + 0.01 * k).tolist()  # the largest entry drawn: 1 + 0.11 at sub-layer 12


def gains(fwd, fwd_max):
    return {
        "single_forward": fwd,
        "single_backward": fwd,
        "composite_forward": fwd,
        "composite_backward": [2 * v for v in fwd],
        "composite_forward_max": fwd_max,
        "composite_backward_max": fwd_max,
    }


def measures(block, seed, moment):
    """One moment's MEASURES of a block, per seed; the values the tests below expect are worked out from these."""
    final = moment == "final"
    hidden = {
        "pre-ln": [[1, 2, 3], [3, 4, 5]][seed] if not final else [[1, 4, 9], [3, 8, 27]][seed],
        "hyper-connections": [1.0 + k for k in range(7)],
    }.get(block, [1.0, 2.0, 4.0])
    out = {"hidden_sq_norm": hidden}
    if block == "mhc":
        res = [mhc_residual(k, seed) if final else np.eye(2).tolist() for k in range(4)]
        fwd = [1.0 + (0.001 * seed if final else 0.0)] * 4
        out["mixing"] = {"residual": res, "pre": [[0.5, 0.5]] * 4, "post": [[1.0, 1.0]] * 4}
        out["mixing"]["gain"] = gains(fwd, [1.0, 1.01, 1.02, 1.03 + 0.01 * seed] if final else [1.0] * 4)
    if block == "hyper-connections":
        res = [hc_residual(k) if final else np.eye(5).tolist() for k in range(12)]
        fwd = HC_FWD if final else [1.0] * 12
        out["mixing"] = {"residual": res, "pre": [[0.2] * 5] * 12, "post": [[1.0] * 5] * 12}
        out["mixing"]["gain"] = gains(fwd, [v + 1.3 for v in fwd])
    if block == "attn-res":
        w = [[0.5, 0.5, None], [0.34, 0.33, 0.33], [0.34, 0.33, 0.33]]
        if final:
            w = [[0.8, 0.2, None], [0.1, 0.2, 0.7], [0.4, 0.3, 0.3]]
        rows, cols = ["mlp 1 input", "attn 2 input", "final norm"], ["embedding", "attn 1", "mlp 1"]
        out["depth_weights"] = {"rows": rows, "cols": cols, "weights": w}
    if block == "denseformer":
        w = [[0.2, 0.9, None], [0.1, -0.3, 1.2]] if final else [[0.0, 1.0, None], [0.0, 0.0, 1.0]]
        cols = ["embedding", "block 1", "block 2"]
        out["depth_weights"] = {"rows": ["block 1", "block 2"], "cols": cols, "weights": w}
    if block == "value-residual":  # fixed: the same at init and after training, different per seed
        out["value_lambdas"] = [None, [0.5, 0.5], [0.5, 0.5]] if seed == 0 else [None, [0.7, 0.3], [0.6, 0.4]]
    if block == "laurel":
        out["low_rank_ratio"] = [0.1 * k + 0.2 * seed + 0.1 for k in range(4)] if final else [0.0] * 4
    if block in ("pre-ln", "laurel"):  # two layers of two heads; LAuReL's stands in for a gated group
        sink = [[0.3, 0.3], [0.3, 0.3]]
        if final:
            sink = (
                [[[0.2, 0.4], [0.5, 0.7]], [[0.4, 0.6], [0.7, 0.9]]][seed]
                if block == "pre-ln"
                else [[0.1] * 2, [0.2] * 2]
            )
        out["attention"] = {"first_token_mass": sink, "uniform": 0.25}
        if block == "laurel":
            out["attention"]["gate_mean"] = [[0.2, 0.4], [0.3, 0.5]] if final else [[0.5, 0.5], [0.5, 0.5]]
    return out


def write_probes(run, block, seed):
    data = {"fingerprint": "x", "block": block, "n_layers": 2, "seed": seed, "step": 50, "tokens": 512}
    data |= {m: measures(block, seed, m) for m in ("init", "final")}
    (run / STREAM_PROBES).write_text(json.dumps(data))


# (folder, block, seed, group label); mhc's seed 1 comes first in the sweep, so "first seed" is by number
RUNS = [
    ("pre-ln_s0", "pre-ln", 0, "Pre-LN"),
    ("pre-ln_s1", "pre-ln", 1, "Pre-LN"),
    ("mhc_s1", "mhc", 1, "mHC"),
    ("mhc_s0", "mhc", 0, "mHC"),
    ("hc_s0", "hyper-connections", 0, "Hyper-Connections"),
    ("attn-res_s0", "attn-res", 0, "AttnRes"),
    ("denseformer_s0", "denseformer", 0, "DenseFormer"),
    ("value-residual_s0", "value-residual", 0, "ResFormer"),
    ("value-residual_s1", "value-residual", 1, "ResFormer"),
    ("laurel_s0", "laurel", 0, "LAuReL"),
    ("laurel_s1", "laurel", 1, "LAuReL"),
]


def make_sweep(root, runs=RUNS, experiment=None, without=()):
    """A sweep of `runs`, each with its probe file except the folders in `without`; one run (post-ln) never
    has one and one (corrupt) has an unreadable one."""
    entries = []
    for name, block, seed, label in [*runs, ("post-ln", "post-ln", 0, "Post-LN"), ("corrupt", "pre-ln", 0, "X")]:
        run = write_run(root / "runs" / name, block, 0.01, last_step=50, steps=50, seed=seed)
        if name == "corrupt":
            (run / STREAM_PROBES).write_text("{")
        elif block != "post-ln" and name not in without:
            write_probes(run, block, seed)
        entry = {"name": name, "label": f"{label} s{seed}", "group": name.rsplit("_", 1)[0], "seed": seed}
        entries.append(entry | {"group_label": label} | ({"experiment": experiment} if experiment else {}))
    sweep = {"name": "stream", "runs": entries}
    if experiment:
        sweep["experiments"] = {experiment: {"title": "Streams", "description": "", "target_run": None}}
    (root / "sweep.json").write_text(json.dumps(sweep))
    return root


def part_of(root, pid=""):
    runs, _ = load_runs(root)
    return Part(pid, "", "", family_order(runs), None, [], [])  # in build_part's order


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """(the stream section, {figure file name: the matplotlib Figure saved}) of the whole sweep."""
    root = make_sweep(tmp_path_factory.mktemp("stream") / "sweep")
    saved = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "DPI", 20)  # the PNGs' pixels are never read: a coarse raster draws the same artists
        real = F.save_figure
        mp.setattr(F, "save_figure", lambda fig, path: (saved.setdefault(path.name, fig), real(fig, path))[1])
        (section,) = S.stream_sections(part_of(root), root / "figures")
    return section, saved


def lines(ax) -> dict:
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def caption(section, name) -> str:
    return next(f.caption for f in section.figures if f.path.name == name)


@pytest.mark.slow  # builds a whole report
def test_no_section_without_probe_files(tmp_path):
    root = make_fake_sweep(tmp_path)
    assert S.stream_sections(part_of(root), tmp_path / "figures") == []
    assert not any(s.id.startswith("stream") for s in build_report(root).sections)
    assert not list((tmp_path / "figures").glob("stream_*"))


def test_every_figure_is_drawn_once_with_its_png(drawn):
    section, saved = drawn
    names = [f.path.name for f in section.figures]
    kinds = ("hidden_norms", "composite_gain", "mixing", "depth_weights", "value_laurel", "sink")
    assert names == [f"stream_{n}.png" for n in kinds]
    assert set(saved) == set(names)
    assert all(f.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in section.figures)
    assert section.id == "stream-probes" and section.part == ""
    assert "(512)" in section.paragraphs[0] and "step 50" in section.paragraphs[0]
    assert "11 run(s) in 7 group(s)" in section.paragraphs[0]  # the corrupt file and post-ln are not counted


def test_hidden_norms_are_the_mean_over_seeds(drawn):
    section, saved = drawn
    init, final = saved["stream_hidden_norms.png"].axes
    assert init.get_yscale() == final.get_yscale() == "log"
    assert lines(init)["Pre-LN [pre-ln]"].get_ydata().tolist() == [2, 3, 4]
    assert lines(final)["Pre-LN [pre-ln]"].get_ydata().tolist() == [2, 6, 18]
    assert lines(final)["Hyper-Connections [hyper-connections]"].get_xdata().tolist() == list(range(7))
    assert "X [pre-ln]" not in lines(final)  # the unreadable file draws nothing
    text = caption(section, "stream_hidden_norms.png")
    assert "Pre-LN's last layer has 9.00x the embedding's (2.00x at init)" in text  # 18 / 2 and 4 / 2
    assert "sum of their n streams" in text and "Attention Residuals the mix the next block reads" in text


def test_composite_gain_curves_and_caption_numbers(drawn):
    section, saved = drawn
    fwd, bwd = saved["stream_composite_gain.png"].axes
    assert fwd.get_yscale() == "log"
    hc = lines(fwd)
    assert hc["Hyper-Connections [hyper-connections]"].get_ydata().tolist() == HC_FWD
    assert hc["Hyper-Connections [hyper-connections]"].get_linestyle() == "-"
    assert hc["Hyper-Connections [hyper-connections], init"].get_linestyle() == "--"
    assert hc["mHC [mhc]"].get_ydata() == pytest.approx([1.0005] * 4)  # seeds 1.0 and 1.001
    assert lines(bwd)["Hyper-Connections [hyper-connections]"].get_ydata().tolist() == [2 * v for v in HC_FWD]
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in fwd.get_lines())  # the line at 1
    assert "Pre-LN [pre-ln]" not in hc
    text = caption(section, "stream_composite_gain.png")
    assert "Hyper-Connections' composite gain reaches 1.90 (up to 3.20 on one token) at sub-layer 8 (mlp 4)" in text
    assert "mHC's composite gain stays at 1.00 (up to 1.04 on one token)" in text  # seed 1's last, 1.03 + 0.01


def test_pick_sublayers_keeps_the_first_and_the_last():
    assert SD.pick_sublayers(4) == [0, 1, 2, 3]
    assert SD.pick_sublayers(12) == [0, 2, 3, 5, 6, 8, 9, 11]  # round(11 * i / 7)
    assert SD.pick_sublayers(48) == [0, 7, 13, 20, 27, 34, 40, 47]
    assert S.sublayer_name(0) == "attn 1" and S.sublayer_name(11) == "mlp 6"


def test_mixing_matrices_of_the_first_seed_on_one_scale(drawn):
    section, saved = drawn
    panels = [ax for ax in saved["stream_mixing.png"].axes if ax.get_visible() and ax.get_images()]
    hc, mhc = panels[:8], panels[8:]  # one row per group, in the registry's order
    assert hc[0].get_ylabel() == "Hyper-Connections" and mhc[0].get_ylabel() == "mHC"
    assert [ax.get_title() for ax in hc] == ["attn 1", "attn 2", "mlp 2", "mlp 3", "attn 4", "attn 5", "mlp 5", "mlp 6"]
    assert [ax.get_title() for ax in mhc] == ["attn 1", "mlp 1", "attn 2", "mlp 2"]
    for ax, k in zip(hc, [0, 2, 3, 5, 6, 8, 9, 11]):
        assert np.allclose(ax.get_images()[0].get_array(), hc_residual(k)) and not ax.texts  # n = 5: no numbers
    for ax, k in zip(mhc, range(4)):
        assert np.allclose(ax.get_images()[0].get_array(), mhc_residual(k, 0))  # seed 0, though listed second
        a = 0.1 * (k + 1)
        assert sorted(t.get_text() for t in ax.texts) == sorted([f"{1 - a:.2f}", f"{a:.2f}"] * 2)
    assert all(ax.get_images()[0].get_clim() == pytest.approx((-1.11, 1.11)) for ax in panels)  # one scale
    assert "mHC's largest off-diagonal weight is 0.40" in caption(section, "stream_mixing.png")
    assert "Hyper-Connections' largest off-diagonal weight is 0.11" in caption(section, "stream_mixing.png")


def test_depth_weights_mask_the_sources_not_read(drawn):
    section, saved = drawn
    axes = {ax.get_title(): ax for ax in saved["stream_depth_weights.png"].axes if ax.get_images()}
    assert set(axes) == {f"{g}, {w}" for g in ("AttnRes", "DenseFormer") for w in ("at init", "after training")}
    data = axes["AttnRes, after training"].get_images()[0].get_array()
    assert data.mask.tolist() == [[False, False, True], [False] * 3, [False] * 3]
    assert data[1].tolist() == [0.1, 0.2, 0.7]
    dense = axes["DenseFormer, at init"]
    assert dense.get_images()[0].get_array().mask[0, 2]
    assert [t.get_text() for t in dense.get_xticklabels()] == ["embedding", "block 1", "block 2"]
    assert [t.get_text() for t in dense.get_yticklabels()] == ["block 1", "block 2"]
    assert dense.get_images()[0].get_clim() == (-1.2, 1.2)  # the group's own largest |weight|
    text = caption(section, "stream_depth_weights.png")
    # AttnRes: (0.8 + 0.1 + 0.4) / 3 on the embedding; |0.7 - 0.33| the largest change
    assert "AttnRes' rows put 0.43 on the embedding on average" in text
    assert "largest change from init is attn 2 input on mlp 1 (0.33 to 0.70)" in text
    assert "DenseFormer's rows put 0.15 on the embedding" in text and "block 2 on block 1 (0.00 to -0.30)" in text


def test_tick_labels_are_thinned_evenly():
    names = [f"s{i}" for i in range(25)]
    assert S._ticks(names, 9) == ([0, 3, 6, 9, 12, 15, 18, 21, 24], [f"s{i}" for i in range(0, 25, 3)])
    assert S._ticks(names[:5]) == ([0, 1, 2, 3, 4], names[:5])


def test_lambdas_and_laurel_ratio(drawn):
    section, saved = drawn
    lam1, lam2, ratio = saved["stream_value_laurel.png"].axes
    got = lines(lam1)["ResFormer [value-residual]"].get_ydata()
    assert np.isnan(got[0]) and got[1:].tolist() == pytest.approx([0.6, 0.55])  # layer 1 has none
    assert lines(lam2)["ResFormer [value-residual]"].get_ydata()[1:].tolist() == pytest.approx([0.4, 0.45])
    assert lines(lam1)["ResFormer [value-residual], init"].get_linestyle() == "--"
    assert lines(ratio)["LAuReL [laurel]"].get_ydata().tolist() == pytest.approx([0.2, 0.3, 0.4, 0.5])
    assert lines(ratio)["LAuReL [laurel], init"].get_ydata().tolist() == [0, 0, 0, 0]
    text = caption(section, "stream_value_laurel.png")
    assert "ResFormer's lambdas are fixed (unchanged by training): λ1 0.55 to 0.60 and λ2 0.40 to 0.45" in text
    assert "LAuReL's low-rank path is 0.20 to 0.50 times the identity's norm (0.00 at init)" in text


def test_trained_lambdas_are_not_called_fixed(tmp_path):
    (run,) = load_runs(write_run(tmp_path / "vr", "value-residual", 0.01, last_step=10))[0]
    data = {"init": {"value_lambdas": [None, [0.5, 0.5]]}, "final": {"value_lambdas": [None, [0.8, 0.5]]}}
    group = SD.ProbedGroup("vr", "ResFormer", "value-residual", [run], [data])
    assert not SD.lambdas_fixed(group)
    assert "were trained: after training λ1 0.80 and λ2 0.50 (at init λ1 0.50, λ2 0.50)" in S.value_caption([group])
    data["final"] = data["init"]
    assert SD.lambdas_fixed(group)


def test_seed_mean_refuses_files_of_different_depths():
    assert SD.seed_mean([[1, 2], [3, 4]]).tolist() == [2, 3]
    assert SD.seed_mean([[1, 2], None, [3, 4, 5]]) is None and SD.seed_mean([None]) is None
    assert np.isnan(SD.seed_mean([[None, 1.0]])[0])


def test_a_part_of_pre_ln_only_draws_the_hidden_norms(tmp_path):
    root = make_sweep(tmp_path, [r for r in RUNS if r[1] == "pre-ln"])
    (section,) = S.stream_sections(part_of(root), tmp_path / "figures")
    assert [f.path.name for f in section.figures] == ["stream_hidden_norms.png", "stream_sink.png"]


def test_first_token_mass_and_gate_per_layer(drawn):
    """Per layer the mean over heads, then over seeds: Pre-LN's (0.3, 0.6) and (0.5, 0.8) average to (0.4, 0.7);
    the gate panel draws only the group that has a gate."""
    section, saved = drawn
    sink, gate = saved["stream_sink.png"].axes
    assert lines(sink)["Pre-LN [pre-ln]"].get_ydata() == pytest.approx([0.4, 0.7])
    assert lines(sink)["Pre-LN [pre-ln], init"].get_ydata() == pytest.approx([0.3, 0.3])
    assert lines(sink)["LAuReL [laurel]"].get_ydata() == pytest.approx([0.1, 0.2])
    assert set(lines(gate)) == {"LAuReL [laurel]", "LAuReL [laurel], init"}
    assert lines(gate)["LAuReL [laurel]"].get_ydata() == pytest.approx([0.3, 0.4])
    text = caption(section, "stream_sink.png")
    assert "Pre-LN's is 0.40 to 0.70 per layer (0.30 at init)" in text
    assert "LAuReL's is 0.10 to 0.20 per layer (0.30 at init), its gate 0.30 to 0.40 per layer" in text
    assert "spread evenly over the keys would put 0.25 there" in text


@pytest.mark.slow  # renders a whole report
def test_in_the_report_after_the_loss_sections_named_for_the_experiment(tmp_path):
    root = make_sweep(tmp_path, RUNS[:3], experiment="streams", without=("pre-ln_s1",))
    stale = tmp_path / "figures" / "stream_gone.png"
    stale.parent.mkdir()
    stale.write_bytes(b"old")
    report = generate_report(root)
    assert "The residual stream: probes at init and after training" in report.md_path.read_text()
    assert "figures/stream_hidden_norms_streams.png" in report.md_path.read_text()
    ids = [s.id for s in report.sections]
    assert ids.index("stream-probes-streams") == ids.index("eval-loss-streams") + 1
    section = report.sections[ids.index("stream-probes-streams")]
    assert section.part == "streams"
    names = ["hidden_norms", "composite_gain", "mixing", "sink"]
    assert [f.path.name for f in section.figures] == [f"stream_{n}_streams.png" for n in names]
    assert all(f.path.is_file() for f in section.figures) and not stale.exists()
    # seed 1 has no file: seed 0 alone, 9 / 1 and 3 / 1, not the two seeds' 18 / 2 and 4 / 2
    assert "Pre-LN's last layer has 9.00x the embedding's (3.00x at init)" in section.figures[0].caption
