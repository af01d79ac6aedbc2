"""The report's PNG figures: losses against steps and wall-clock time, evaluation loss, gains, init probes.

Matplotlib's object API on the Agg canvas (no pyplot, no global backend change). Every block
has one colour in every figure (its BlockSpec's `colour`) and each family its own line style, so a dozen
curves stay apart; runs of the same block differ by line style and shade. Legends list the runs by family,
then block (runs.family_order).
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np

from blocklab.reporting.analysis import Target, smoothed_loss
from blocklab.reporting.runs import Run, family_order

# Colours for blocks the registry does not know (a run of a block from outside the package): those no
# registered block takes are used, so the list holds more than a new block or two will take.
_SPARE = ["#e7ba52", "#ad494a", "#a55194", "#5254a3", "#b5cf6b", "#9c9ede", "#cedb9c", "#e7cb94", "#de9ed6"]
_STYLES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1))]  # the last: dash-dot-dot
# A family's line style: its blocks' first run draws with it. Keys are registry.FAMILIES; a family
# added there without a style here draws solid.
FAMILY_STYLES = {"classic": "-", "simplified": "--", "successor": "-.", "stream": _STYLES[4], "ablation": ":"}
DPI = 100

PROBE_CAPTIONS = {  # name in blocklab.probes.plots.FIGURES -> (title, caption)
    "hidden_norms": (
        "Hidden-state norm per layer",
        "Squared hidden-state norm per layer at initialisation; predictions dashed (Xiong et al.'s Lemma 2 "
        "predicts Post-LN flat and Pre-LN growing about linearly).",
    ),
    "grad_norms": (
        "Weight gradient norms per layer",
        "Gradient norm of every weight per layer at initialisation (Xiong et al. Fig. 3 a/b report Post-LN's "
        "growing toward the output and Pre-LN's flat).",
    ),
    "last_ffn_grad": (
        "Last FFN gradient against depth",
        "Gradient norm of the last FFN output weight against depth (Xiong et al.'s Theorem 1 predicts "
        "Post-LN constant and Pre-LN shrinking like 1/sqrt(L)).",
    ),
    "cosine_similarity": (
        "Token cosine similarity per layer",
        "Mean pairwise cosine similarity of token representations per layer (1 is rank collapse; He & "
        "Hofmann expect skipless softmax attention to tend to 1 and shaped attention not to).",
    ),
    "model_update": (
        "Model update against depth",
        "How far one first Adam step (lr 1e-3) moves the logits, against depth (DeepNet Fig. 3 and "
        "Theorem 4.1: Post-LN's update grows with depth, DeepNorm's stays bounded; its bound dashed).",
    ),
}


def block_colour(block: str) -> str:
    """The block's colour (its BlockSpec's); a name the registry does not know gets a spare one that no
    registered block uses."""
    from blocklab.blocks import REGISTRY

    if block in REGISTRY:
        return REGISTRY[block].colour
    taken = {s.colour.lower() for s in REGISTRY.values()}
    spare = [c for c in _SPARE if c.lower() not in taken] or _SPARE
    return spare[sum(map(ord, block)) % len(spare)]


def family_style(block: str) -> str:
    """The line style of the block's family (solid for a block the registry does not know)."""
    from blocklab.blocks import REGISTRY

    spec = REGISTRY.get(block)
    return FAMILY_STYLES.get(spec.family, "-") if spec else "-"


def run_styles(runs: list[Run]) -> dict[str, tuple]:
    """{run name: (colour, linestyle)}: the block's colour and its family's style; the k-th run of a block
    (another warm-up, learning rate, ...) steps k styles on from the family's, then changes shade."""
    from matplotlib.colors import to_rgb

    seen: dict[str, int] = {}
    out = {}
    for r in runs:
        k = seen.get(r.block, 0)
        seen[r.block] = k + 1
        rgb = np.array(to_rgb(block_colour(r.block)))
        shade = k // len(_STYLES)
        if shade:  # alternate darker / lighter after every len(_STYLES) line styles
            f = min(0.6, 0.25 * ((shade + 1) // 2))
            rgb = rgb * (1 - f) if shade % 2 else rgb + (1 - rgb) * f
        first = _STYLES.index(family_style(r.block))
        out[r.name] = (tuple(rgb), _STYLES[(first + k) % len(_STYLES)])
    return out


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


def new_figure(figsize=(7.5, 4.4)):
    """A figure of its own, outside pyplot's global state (nothing to close), with one axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def save_figure(fig, path: Path) -> Path:
    """Render `fig` to the PNG `path` (its folder made if missing) and return the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def place_legend(ax, n: int) -> None:
    """The legend of n entries: inside the axes when few, beside them (outside the plot) when more than 7."""
    if n > 7:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=8)


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds > 3 * 3600:
        return 3600.0, "h"
    if seconds > 180:
        return 60.0, "min"
    return 1.0, "s"


def unigram_entropies(runs: list[Run]) -> list[float]:
    """The distinct unigram entropies the runs' summaries record (one per training split)."""
    values = {
        round(float(h), 4)
        for r in runs
        for h in [r.summary and r.summary.unigram_entropy]
        if isinstance(h, (int, float)) and math.isfinite(h)
    }
    return sorted(values)


def group_styles(runs: list[Run]) -> dict[str, tuple]:
    """{run name: (colour, linestyle)}, one style per seed group (its first run's)."""
    firsts = list({r.group: r for r in reversed(runs)}.values())[::-1]
    by_group = {r.group: style for r, style in zip(firsts, run_styles(firsts).values())}
    return {r.name: by_group[r.group] for r in runs}


def _end_marker(ax, run: Run, xs, ys, colour) -> None:
    """Diverged runs end in a cross, stalled runs in an open circle."""
    marker = {"diverged": "x", "stalled": "o"}.get(run.status)
    if marker and len(xs):
        ax.plot(
            xs[-1:],
            ys[-1:],
            marker=marker,
            ms=9,
            mew=2,
            color=colour,
            ls="none",
            mfc="none" if marker == "o" else colour,
        )


def plot_train_loss(runs: list[Run], path: Path, x: str, target: Target) -> Path | None:
    """Training loss against `x` ("step" or "elapsed_s"): raw faint, moving average bold. Seeds of one
    group (against steps): each seed thin, their mean bold, the band between the lowest and highest."""
    from blocklab.reporting.groups import mean_curve

    runs = family_order(runs)
    curves = [(r, *smoothed_loss(r, x)) for r in runs if r.rows]
    curves = [c for c in curves if len(c[1])]
    if not curves:
        return None
    styles = group_styles(runs)
    scale, unit = (1.0, "") if x == "step" else _time_unit(max(float(c[1][-1]) for c in curves))
    fig, ax = new_figure()
    lows, highs, windows, labelled = [], [], set(), set()
    sizes = {g: sum(1 for r, *_ in curves if r.group == g) for g in {r.group for r, *_ in curves}}
    for r, xs, raw, sm, w in curves:
        colour, ls = styles[r.name]
        xs = xs / scale
        windows.add(w)
        grouped = sizes[r.group] > 1 and x == "step"
        if not grouped:
            ax.plot(xs, raw, color=colour, lw=0.6, alpha=0.25)
        label = (
            None
            if r.group in labelled
            else (f"{r.group_label} [{r.block}]" + (f", mean of {sizes[r.group]} seeds" if grouped else ""))
        )
        labelled.add(r.group)
        ax.plot(
            xs,
            sm,
            color=colour,
            ls=ls,
            lw=0.8 if grouped else 1.6,
            alpha=0.6 if grouped else 1.0,
            label=None if grouped else label,
        )
        _end_marker(ax, r, xs, sm, colour)
        if grouped and label is not None:
            mc = mean_curve([q for q, *_ in curves if q.group == r.group])
            if mc is not None:
                ax.fill_between(mc[0], mc[2], mc[3], color=colour, alpha=0.15, lw=0)
                ax.plot(mc[0], mc[1], color=colour, ls=ls, lw=1.8, label=label)
        lows.append(float(np.nanmin(sm)))
        highs.append(float(sm[min(len(sm) - 1, max(1, len(sm) // 20))]))
    for h in unigram_entropies(runs):
        ax.axhline(h, color="black", ls=":", lw=1.0, label=f"unigram entropy {h:.3g} (stalled runs: o)")
        lows.append(h - 0.05)
    if target.value is not None:
        ax.axhline(target.value, color="0.35", ls="--", lw=0.9, label=f"target loss {target.value:.3g}")
        lows.append(target.value)
    lo, hi = min(lows), max(highs + [h + 0.1 for h in unigram_entropies(runs)])
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        pad = 0.05 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)
    win = (
        "every logged point"
        if windows == {1}
        else "moving average over " + "/".join(str(w) for w in sorted(windows)) + " logged points; raw faint"
    )
    if x == "step":
        ax.set_xlabel("training step")
        ax.set_title(f"Training loss against steps ({win})")
    else:
        ax.set_xlabel(f"wall-clock time since the run started ({unit})")
        ax.set_title(f"Training loss against wall-clock time ({win})")
    ax.title.set_fontsize(10)
    ax.set_ylabel("training loss (cross-entropy, nats/token)")
    ax.grid(alpha=0.3)
    place_legend(ax, len(labelled) + 1)
    return save_figure(fig, path)


def plot_eval_series(ax, runs: list[Run], key: str) -> int:
    """Each run's `key` (an evaluation metric) against steps, markers at the evaluations; the seeds of
    a group share colour, style and one legend entry. Returns the number of groups drawn."""
    runs = family_order(runs)
    styles = group_styles(runs)
    labelled = set()
    for r in runs:
        xs, ys = r.series(key)
        if not ys:
            continue
        colour, ls = styles[r.name]
        seeds = sum(1 for q in runs if q.group == r.group)
        label = (
            None if r.group in labelled else f"{r.group_label} [{r.block}]" + (f", {seeds} seeds" if seeds > 1 else "")
        )
        labelled.add(r.group)
        ax.plot(xs, ys, color=colour, ls=ls, marker="o", ms=3.5, lw=1.4, label=label)
        _end_marker(ax, r, xs, ys, colour)
    return len(labelled)


def plot_eval_loss(runs: list[Run], path: Path) -> Path | None:
    """Evaluation loss against steps; the seeds of a group share colour, style and one legend entry."""
    fig, ax = new_figure()
    n = plot_eval_series(ax, runs, "eval_loss")
    if not n:
        return None
    for h in unigram_entropies(runs):
        ax.axhline(h, color="black", ls=":", lw=1.0, label=f"unigram entropy {h:.3g} (training split)")
    ax.set_xlabel("training step")
    ax.set_ylabel("evaluation loss (validation split, nats/token)")
    ax.set_title("Evaluation loss against steps", fontsize=10)
    ax.grid(alpha=0.3)
    place_legend(ax, n)
    return save_figure(fig, path)


def plot_run_gains(run: Run, path: Path) -> Path | None:
    from blocklab.probes.gains import plot_gains

    out = plot_gains(run.rows, path, title=f"Gains during training: {run.label} [{run.block}]")
    return Path(out) if out else None


def probes_dir(root: Path) -> Path | None:
    for d in (root / "probes", root):
        if (d / "probes.json").is_file():
            return d
    return None


def probe_figures(root: Path, figures: Path) -> list[tuple[Path, str, str]]:
    """[(png in figures/, title, caption)] for the init probes: the PNGs `blocklab probe` wrote, copied
    into figures/, or drawn from probes.json with blocklab.probes.plots when missing."""
    src = probes_dir(root)
    if src is None:
        return []
    from blocklab.probes import plots

    drawers = {
        "hidden_norms": plots.plot_hidden_norms,
        "grad_norms": plots.plot_grad_norms,
        "last_ffn_grad": plots.plot_last_ffn_grad,
        "cosine_similarity": plots.plot_cosine,
    }
    result = None
    out = []
    for name, file in plots.FIGURES.items():
        dst = figures / f"probes_{file}"
        if (src / file).is_file():
            figures.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / file, dst)
        elif name in drawers:
            if result is None:
                result = load_probes(src)
                if result is None:
                    return out
            try:
                drawers[name](result, dst)
            except (KeyError, TypeError, ValueError, IndexError):
                continue  # a probes.json from another version: show what can be drawn
        else:
            continue
        title = name.replace("_", " ")
        out.append((dst, *PROBE_CAPTIONS.get(name, (title, title))))
    return out


def load_probes(src: Path) -> dict | None:
    import json

    try:
        data = json.loads((src / "probes.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
