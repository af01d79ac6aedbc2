"""The residual-stream probes of a part's runs (RUN/stream_probes.json, written by experiments/stream_probes.py
from probes/stream.py's measures at init and after training), drawn: the hidden-state norm per layer (every
block), the composite gain and mixing matrices (Hyper-Connections, mHC), the depth weights (Attention Residuals,
DenseFormer), ResFormer's lambdas and LAuReL's low-rank ratio. The arrays drawn come from the small functions
without matplotlib below, so tests check the numbers, not the pixels; each caption says what they are.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from blocklab.block_table import sublayer_name
from blocklab.reporting import figures as F
from blocklab.reporting.parts import Figure, Part, Section
from blocklab.reporting.runs import Run
from blocklab.reporting.stream_data import (
    DEPTH_BLOCKS,
    HC_BLOCKS,
    MOMENTS,
    SKIP,
    ProbedGroup,
    composite_gain,
    curve,
    depth_map,
    gain_peak,
    gate_curve,
    lambdas_fixed,
    mixing_panels,
    pick_sublayers,
    probed_groups,
    sink_curve,
    uniform_level,
    value_lambdas,
)

CMAP = "RdBu_r"  # diverging, centred at 0: a weight's sign matters as much as its size


def _whose(label: str) -> str:
    return f"{label}'" if label.endswith("s") else f"{label}'s"


def _num(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.3g}"


def _span(a: np.ndarray) -> str:
    lo, hi = _num(float(np.nanmin(a))), _num(float(np.nanmax(a)))
    return lo if lo == hi else f"{lo} to {hi}"


def _both(groups: list[ProbedGroup], measure) -> list[tuple]:
    """[(group, measure(group, "init"), measure(group, "final"))] for the groups measured after training."""
    out = [(g, measure(g, "init"), measure(g, "final")) for g in groups]
    return [t for t in out if t[2] is not None]


def _figure(figsize):
    """A figure outside pyplot's global state, as figures.new_figure makes them."""
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=figsize)


def _log_y(ax) -> None:
    """A log y axis labelled in plain numbers: a short log range otherwise reads "1.8 x 10^0"."""
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    for axis_set in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_set(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _ticks(names: list[str], most: int = 12) -> tuple[list[int], list[str]]:
    """At most `most` of the names, evenly spaced with the first and the last: more would overlap."""
    picked = pick_sublayers(len(names), most)
    return picked, [names[i] for i in picked]


def _group_colours(firsts: list[Run]) -> dict[str, tuple]:
    """{group: colour}: the block's colour, lightened for the second group of the same block (a line style of
    its own is not free here: dashed means at init). Where a block has more than two groups (Pre-LN with and
    without warm-up, with Derf, DyT or the gate) shades run together, so every group gets its own colour."""
    from matplotlib import colormaps
    from matplotlib.colors import to_rgb

    counts: dict[str, int] = {}
    for r in firsts:
        counts[r.block] = counts.get(r.block, 0) + 1
    if max(counts.values(), default=0) > 2:
        palette = colormaps["tab20"].colors
        return {r.group: tuple(palette[i % len(palette)]) for i, r in enumerate(firsts)}
    seen: dict[str, int] = {}
    out = {}
    for r in firsts:
        k = seen[r.block] = seen.get(r.block, -1) + 1
        rgb = np.array(to_rgb(F.block_colour(r.block)))
        out[r.group] = tuple(rgb + (1 - rgb) * min(0.6, 0.4 * k))
    return out


def _draw_panels(panels: list[tuple], path: Path, shared: bool = False) -> Path | None:
    """Side-by-side panels of (title, y label, x: "l" (layers from 0), "layer" or "sub-layer", y scale: "linear",
    "log" or "gain" (log with a line at 1), [(group, init, final)]): after training solid, at init dashed, one
    colour per group (`_group_colours`). `shared`: the panels show the same groups, one legend."""
    panels = [p for p in panels if p[4]]
    if not panels:
        return None
    firsts = list({g.group: g.runs[0] for *_, curves in panels for g, _, _ in curves}.values())
    colours = _group_colours(firsts)
    fig = _figure((4.8 * len(panels) + 0.6, 4.2))
    for ax, (title, ylabel, xaxis, yscale, curves) in zip(np.atleast_1d(fig.subplots(1, len(panels))), panels):
        start, count = int(xaxis != "l"), max(len(f) for _, _, f in curves)
        for g, init, final in curves:
            for y, ls, label in ((final, "-", g.name), (init, "--", f"{g.name}, init")):
                if y is not None:
                    ax.plot(range(start, len(y) + start), y, color=colours[g.group], ls=ls, lw=1.5, label=label)
        names = [sublayer_name(k) if xaxis == "sub-layer" else str(k + start) for k in range(count)]
        ticks, names = _ticks(names)
        ax.set_xticks([k + start for k in ticks], names, fontsize=7, rotation=45 if xaxis == "sub-layer" else 0)
        ax.set_xlabel({"l": "layer l (0: the embedding)"}.get(xaxis, xaxis), fontsize=8)
        if yscale == "gain":
            ax.axhline(1.0, color="black", lw=0.6)
        if yscale != "linear":
            _log_y(ax)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        if not shared:
            F.place_legend(ax, 2 * len(curves))
    if shared:  # beside the last panel, of the panel with the most groups: inside it would hide the curves
        fullest = max(fig.axes, key=lambda a: len(a.get_lines()))
        ax.legend(
            *fullest.get_legend_handles_labels(),
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
        )
    return F.save_figure(fig, path)


def plot_hidden_norms(groups: list[ProbedGroup], path: Path) -> Path | None:
    panels = []
    for moment, words in MOMENTS:
        curves = [(g, None, y) for g in groups if (y := curve(g, moment, "hidden_sq_norm")) is not None]
        panels.append((f"Mean |x_l|^2 per layer, {words}", "mean |x_l|^2 (log)", "l", "log", curves))
    return _draw_panels(panels, path, shared=True)


def hidden_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g, init, final in _both(groups, lambda g, m: curve(g, m, "hidden_sq_norm")):
        if init is not None and len(final) > 1 and final[0] > 0 and init[0] > 0:
            a, b = _num(float(final[-1] / final[0])), _num(float(init[-1] / init[0]))
            said.append(f"{_whose(g.label)} last layer has {a}x the embedding's ({b}x at init)")
    return (
        "Mean over tokens of the squared hidden-state norm against the layer, at init and after training; the "
        "mean over the seeds measured. Hyper-Connections and mHC report the sum of their n streams, Attention "
        "Residuals the mix the next block reads. After training " + ("; ".join(said) or "no ratio can be given") + "."
    )


def plot_composite_gain(groups: list[ProbedGroup], path: Path) -> Path | None:
    panels = [
        (f"Composite {d} gain over depth", f"Amax gain: largest {sums} sum (log)", "sub-layer", "gain", curves)
        for d, sums in (("forward", "row"), ("backward", "column"))
        for curves in [_both(groups, lambda g, m, d=d: composite_gain(g, m, d))]
    ]
    return _draw_panels(panels, path)


def gain_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g in groups:
        if (peak := gain_peak(g)) is not None:
            value, k, top, flat = peak
            where = "stays at" if flat else "reaches"
            at = "" if flat else f" at sub-layer {k + 1} ({sublayer_name(k)})"
            said.append(f"{_whose(g.label)} composite gain {where} {_num(value)} (up to {_num(top)} on one token){at}")
    return (
        "mHC's Amax gain magnitude (Xie et al. 2025, Fig. 3) of the product of the residual mixing matrices of "
        "sub-layers 1..k, per token then averaged over tokens: the largest absolute row sum (forward signal) and "
        "column sum (backward gradient); 1 is neither growth nor decay. After training solid, at init dashed, the "
        "mean over seeds. After training " + "; ".join(said) + "."
    )


def plot_mixing(groups: list[ProbedGroup], path: Path) -> Path | None:
    rows = [(g, p) for g in groups if (p := mixing_panels(g))]
    if not rows:
        return None
    cols = max(len(p) for _, p in rows)
    scale = max(float(np.nanmax(np.abs(m))) for _, p in rows for _, m in p) or 1.0
    fig = _figure((1.7 * cols + 1.2, 1.9 * len(rows) + 0.6))
    axes = np.array(fig.subplots(len(rows), cols, squeeze=False))
    for axrow, (g, panels) in zip(axes, rows):
        for ax, (k, m) in zip(axrow, panels):
            image = ax.imshow(m, cmap=CMAP, vmin=-scale, vmax=scale)
            if len(m) <= 4:  # larger grids leave no room for the numbers
                for (i, j), v in np.ndenumerate(m):
                    colour = "white" if abs(v) > 0.6 * scale else "black"
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=colour)
            ax.set_title(sublayer_name(k), fontsize=9)
            ax.set(xticks=[], yticks=[])
        axrow[0].set_ylabel(g.label, fontsize=9)
        for ax in axrow[len(panels) :]:
            ax.set_visible(False)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="mixing weight")
    fig.suptitle("Trained residual mixing matrices (mean over tokens), first seed", fontsize=10)
    return F.save_figure(fig, path)


def mixing_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g in groups:
        if panels := mixing_panels(g):
            off = max(float(np.max(np.abs(m - np.diag(np.diag(m))))) for _, m in panels)
            said.append(f"{_whose(g.label)} largest off-diagonal weight is {_num(off)}")
    return (
        "Each sub-layer's residual mixing matrix after training (Hyper-Connections' A_r^T, mHC's H_res; row: the "
        "new stream, column: the old one), the mean over tokens, for the group's first seed; at most eight "
        "sub-layers, evenly spaced with the first and the last. The identity keeps the streams apart; mHC's rows "
        "and columns sum to 1. In the sub-layers drawn " + "; ".join(said) + "."
    )


def plot_depth_weights(groups: list[ProbedGroup], path: Path) -> Path | None:
    rows = [(g, maps) for g in groups if any(maps := [depth_map(g.data[0], m) for m, _ in MOMENTS])]
    if not rows:
        return None
    fig = _figure((11, 4.0 * len(rows)))
    axes = np.array(fig.subplots(len(rows), 2, squeeze=False, gridspec_kw={"wspace": 0.35, "hspace": 0.45}))
    for axrow, (g, maps) in zip(axes, rows):
        weights = np.concatenate([m[2][np.isfinite(m[2])] for m in maps if m is not None])
        scale = float(np.max(np.abs(weights), initial=0.0)) or 1.0  # one scale per block: init against trained
        for ax, m, (_, words) in zip(axrow, maps, MOMENTS):
            if m is None:
                ax.set_visible(False)
                continue
            names, cols, w = m
            image = ax.imshow(np.ma.masked_invalid(w), cmap=CMAP, vmin=-scale, vmax=scale, aspect="auto")
            ax.set_facecolor("0.75")  # masked: a source this row does not read
            ax.set_xticks(*_ticks(cols), fontsize=7, rotation=45, ha="right")
            ax.set_yticks(*_ticks(names), fontsize=7)
            ax.set_title(f"{g.label}, {words}", fontsize=10)
        fig.colorbar(image, ax=axrow.tolist(), shrink=0.85, label="weight")
    fig.suptitle("Depth weights: each row's weight on each source (grey: not read), first seed", fontsize=10)
    return F.save_figure(fig, path)


def depth_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g in groups:
        maps = [depth_map(g.data[0], m) for m, _ in MOMENTS]
        if any(m is None for m in maps) or maps[0][2].shape != maps[1][2].shape:
            continue
        (_, _, a), (names, cols, b) = maps
        change = np.where(np.isfinite(b - a), np.abs(b - a), -1.0)
        i, j = np.unravel_index(int(np.argmax(change)), change.shape)
        emb = float(np.nanmean(b[:, 0])) if np.isfinite(b[:, 0]).any() else math.nan
        said.append(
            f"{_whose(g.label)} rows put {_num(emb)} on the embedding on average and the largest change from "
            f"init is {names[i]} on {cols[j]} ({_num(float(a[i, j]))} to {_num(float(b[i, j]))})"
        )
    return (
        "Attention Residuals' softmax weights of each mix over its sources (mean over tokens) and DenseFormer's "
        "alphas of each block over X_0..X_L, at init and after training, for the group's first seed; grey cells "
        "are sources a row does not read. After training " + ("; ".join(said) or "no change can be compared") + "."
    )


def plot_value_laurel(groups: list[ProbedGroup], path: Path) -> Path | None:
    lams = _both(groups, value_lambdas)
    panels = [
        (f"ResFormer's λ{i + 1} per layer", f"λ{i + 1} (layer 1 has none)", "layer", "linear", curves)
        for i in range(2)
        for curves in [[(g, None if a is None else a[:, i], b[:, i]) for g, a, b in lams]]
    ]
    ratios = _both(groups, lambda g, m: curve(g, m, "low_rank_ratio"))
    panels.append(("LAuReL's low-rank path", "|B A x| / |x|", "sub-layer", "linear", ratios))
    return _draw_panels(panels, path)


def value_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g, init, final in _both(groups, value_lambdas):
        if np.isfinite(final).any():
            span = f"λ1 {_span(final[:, 0])} and λ2 {_span(final[:, 1])}"
            if lambdas_fixed(g):
                said.append(f"{_whose(g.label)} lambdas are fixed (unchanged by training): {span}")
            else:
                was = f" (at init λ1 {_span(init[:, 0])}, λ2 {_span(init[:, 1])})" if init is not None else ""
                said.append(f"{_whose(g.label)} lambdas were trained: after training {span}{was}")
    for g, init, final in _both(groups, lambda g, m: curve(g, m, "low_rank_ratio")):
        was = f" ({_span(init)} at init)" if init is not None else ""
        said.append(f"{_whose(g.label)} low-rank path is {_span(final)} times the identity's norm{was}")
    return (
        "ResFormer mixes each layer's values with the first layer's, V_l' = λ1 V_1 + λ2 V_l; LAuReL adds a low-rank "
        "path B A x beside the identity, drawn as its norm over |x| (means over tokens). After training solid, at "
        "init dashed, the mean over seeds. " + ". ".join(s[0].upper() + s[1:] for s in said) + "."
    )


def plot_sink(groups: list[ProbedGroup], path: Path) -> Path | None:
    panels = [
        ("Attention on the first token", "mean attention on token 0", "layer", "linear", _both(groups, sink_curve)),
        ("Gate (attn_gate) per layer", "mean of sigmoid(x W_g)", "layer", "linear", _both(groups, gate_curve)),
    ]
    return _draw_panels(panels, path, shared=True)


def sink_caption(groups: list[ProbedGroup]) -> str:
    said = []
    for g, init, final in _both(groups, sink_curve):
        gate = gate_curve(g, "final")
        shut = f", its gate {_span(gate)} per layer" if gate is not None else ""
        said.append(f"{_whose(g.label)} is {_span(final)} per layer ({_span(init)} at init){shut}")
    level = next((v for g in groups if (v := uniform_level(g)) is not None), None)
    even = f"; attention spread evenly over the keys would put {_num(level)} there" if level is not None else ""
    return (
        "The attention sink: the mean attention probability on the first token, over the queries after it and the "
        "heads, per layer; and, for gated attention, the gate's mean (0.5 for a zero W_g; lower where it closes). "
        f"After training solid, at init dashed, the mean over seeds{even}. After training the first-token mass "
        + ("; ".join(said) or "was not measured")
        + "."
    )


def stream_sections(part: Part, fig_dir: Path) -> list[Section]:
    """The part's residual-stream section: one figure per kind of probe its runs have; [] when no run of the
    part has a readable stream_probes.json."""
    groups = probed_groups([r for r in part.runs if r.exists])
    if not groups:
        return []
    hc = [g for g in groups if g.block in HC_BLOCKS]
    depth = [g for g in groups if g.block in DEPTH_BLOCKS]
    figs = []
    for base, plot, caption, chosen, title in [
        ("stream_hidden_norms", plot_hidden_norms, hidden_caption, groups, "Hidden-state norm per layer"),
        ("stream_composite_gain", plot_composite_gain, gain_caption, hc, "Composite gain over depth"),
        ("stream_mixing", plot_mixing, mixing_caption, hc, "Residual mixing matrices after training"),
        ("stream_depth_weights", plot_depth_weights, depth_caption, depth, "Depth weights at init and after training"),
        ("stream_value_laurel", plot_value_laurel, value_caption, groups, "ResFormer's lambdas and LAuReL's ratio"),
        ("stream_sink", plot_sink, sink_caption, groups, "The attention sink and the gate"),
    ]:
        try:
            if chosen and (path := plot(chosen, fig_dir / f"{part.name(base)}.png")):
                figs.append(Figure(Path(path), title, caption(chosen)))
        except SKIP:
            continue  # a hand-edited file or one of another version: the other figures still show
    data = [d for g in groups for d in g.data]
    steps, tokens = ("/".join(sorted({str(d.get(k)) for d in data})) for k in ("step", "tokens"))
    intro = (
        "Each final run of a residual-stream block, of gated attention and of Pre-LN, measured on one batch of "
        "validation tokens "
        f"({tokens}) twice: its own initial model, rebuilt from its seed, and its last checkpoint (step {steps}); "
        f"{len(data)} run(s) in {len(groups)} group(s)."
    )
    title = "The residual stream: probes at init and after training"
    return [Section(part.name("stream-probes", "-"), title, paragraphs=[intro], figures=figs, part=part.id)]
