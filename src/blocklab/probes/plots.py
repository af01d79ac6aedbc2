"""PNG figures of a probes.json result, with the papers' predictions drawn dashed beside the measurements.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend change),
so it is safe on headless machines and inside other programs.
"""

from __future__ import annotations

import math
import os

import numpy as np

from blocklab.blocks import REGISTRY

FIGURES = {
    "hidden_norms": "hidden_norms.png",
    "grad_norms": "grad_norms.png",
    "last_ffn_grad": "last_ffn_grad.png",
    "cosine_similarity": "cosine_similarity.png",
    "model_update": "model_update.png",
}


def new_figure(nrows: int, ncols: int, figsize):
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    axes = np.array(fig.subplots(nrows, ncols, squeeze=False))
    return fig, axes


def save_figure(fig, path, tight: bool = True) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    if tight:
        fig.tight_layout()
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    return os.fspath(path)


def _arr(values) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def _grid(n: int, w: float = 4.4, h: float = 3.4):
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = new_figure(nrows, ncols, (w * ncols, h * nrows))
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)[:n]


def _depth_colours(depths):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    n = max(len(depths) - 1, 1)
    return {L: cmap(0.9 * i / n) for i, L in enumerate(depths)}


def _title(result: dict) -> str:
    m, s = result["settings"]["model"], result["settings"]
    data = f"data={s['data']}, " if s.get("data") else ""
    return (
        f"d={m['d_model']}, heads={m['n_heads']}, d_ff={m['d_ff']}, {m['norm']}, {m['activation']}, "
        f"init={m['init']}, task={m['task']}, {data}{len(s['seeds'])} seeds x {s['n_batches']} batches"
    )


def plot_hidden_norms(result: dict, path) -> str:
    """|x_l|^2 / d against layer l, one panel per block, one line per depth; predictions dashed."""
    d = result["settings"]["model"]["d_model"]
    depths = result["settings"]["depths"]
    colours = _depth_colours(depths)
    blocks = list(result["results"])
    fig, axes = _grid(len(blocks))
    for ax, block in zip(axes, blocks):
        values = []
        for L in depths:
            y = _arr(result["results"][block][str(L)]["hidden_sq_norm"]["mean"]) / d
            values.extend(y[np.isfinite(y)])
            ax.plot(range(L + 1), y, "o-", ms=2.5, lw=1.2, color=colours[L], label=f"L={L}")
        pred = (result["predictions"].get(block) or {}).get("hidden_sq_norm")
        if pred:
            layers = np.arange(len(pred["lower"]))
            lo, hi = _arr(pred["lower"]) / d, _arr(pred["upper"]) / d
            exact = np.allclose(lo, hi)
            ax.plot(layers, lo, "k--", lw=1, label=pred["source"] if exact else f"{pred['source']}: bounds")
            if not exact:
                ax.plot(layers, hi, "k--", lw=1)
                ax.fill_between(layers, lo, hi, color="k", alpha=0.06)
            values.extend(lo[np.isfinite(lo)]), values.extend(hi[np.isfinite(hi)])
            paper = pred.get("lemma2_paper")
            if paper:
                plo, phi = _arr(paper["lower"]) / d, _arr(paper["upper"]) / d
                ax.plot(layers, plo, ls="-.", color="tab:red", lw=0.9, label=paper["source"])
                ax.plot(layers, phi, ls="-.", color="tab:red", lw=0.9)
                values.extend(plo), values.extend(phi)
        pos = [v for v in values if v > 0]
        if pos and max(pos) / min(pos) > 50:
            ax.set_yscale("log")
        ax.set_title(block)
        ax.set_xlabel("layer l (0 = embedding output)")
        ax.set_ylabel("E|x_l|^2 / d")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Squared hidden-state norm at init (Xiong et al. Lemma 2)\n" + _title(result), fontsize=9)
    return save_figure(fig, path)


def plot_grad_norms(result: dict, path, depth: int | None = None) -> str:
    """Gradient norm of every weight per layer (Xiong et al. Fig. 3 a/b), one panel per block."""
    depth = depth or max(result["settings"]["depths"])
    blocks = list(result["results"])
    fig, axes = _grid(len(blocks))
    for ax, block in zip(axes, blocks):
        r = result["results"][block][str(depth)]
        for role, stats in sorted(r["grad_norm"].items()):
            y = _arr(stats["mean"])
            if np.isfinite(y).any():
                ax.plot(range(len(y)), y, "o-", ms=2.5, lw=1.1, label=role)
        ax.set_yscale("log")
        ax.set_title(f"{block}, L={depth}")
        ax.set_xlabel("layer (block index)")
        ax.set_ylabel("|dLoss/dW| (Frobenius)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle(
        "Gradient norm of each weight per layer at init, as measured (to compare with Xiong et al. Fig. 3 a/b)\n"
        + _title(result),
        fontsize=9,
    )
    return save_figure(fig, path)


def _plot_vs_depth(per_block: dict, path, ylabel: str, title: str) -> str:
    """One log-log line per block of a `*_vs_depth` table (depths, mean, std, slope, reference)."""
    from matplotlib import colormaps

    fig, axes = new_figure(1, 1, (6.4, 4.6))
    ax = axes[0, 0]
    cmap = colormaps["tab10"]
    for i, (block, v) in enumerate(per_block.items()):
        x, y, e = np.array(v["depths"], float), _arr(v["mean"]), _arr(v["std"])
        if not np.isfinite(y).any():
            continue
        slope = "n/a" if v["slope"] is None else f"{v['slope']:+.2f}"
        ax.errorbar(
            x,
            y,
            yerr=np.nan_to_num(e),
            fmt="o-",
            ms=4,
            lw=1.3,
            capsize=2,
            color=cmap(i % 10),
            label=f"{block} (fitted slope {slope})",
        )
        ref = v.get("reference")
        if ref:
            ax.plot(
                x, ref["values"], "--", lw=1, color=cmap(i % 10), label=f"{ref['source']} (slope {ref['slope']:+.1f})"
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("depth L (number of blocks)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6)
    return save_figure(fig, path)


def plot_last_ffn_grad(result: dict, path) -> str:
    """Gradient norm of the last block's FFN output weight against depth, log-log (Xiong Thm 1, Fig. 3 c/d)."""
    return _plot_vs_depth(
        result["last_ffn_vs_depth"],
        path,
        "|dLoss/dW| of blocks[-1].mlp.fc2",
        "Last FFN output-weight gradient vs depth at init\n" + _title(result),
    )


def plot_model_update(result: dict, path) -> str | None:
    """DeepNet's model update against depth: the RMS change of the logits after one first Adam step."""
    per_block = result.get("model_update_vs_depth")
    if not per_block:
        return None
    lr = next(iter(per_block.values())).get("lr")
    return _plot_vs_depth(
        per_block,
        path,
        f"RMS change of the logits after one Adam step (lr {lr:g})",
        "Model update vs depth at init (DeepNet Fig. 3)\n" + _title(result),
    )


def plot_cosine(result: dict, path) -> str:
    """Mean pairwise cosine similarity of token representations per layer (rank collapse)."""
    depths = result["settings"]["depths"]
    colours = _depth_colours(depths)
    blocks = list(result["results"])
    fig, axes = _grid(len(blocks))
    for ax, block in zip(axes, blocks):
        for L in depths:
            y = _arr(result["results"][block][str(L)]["cosine_similarity"]["mean"])
            ax.plot(range(L + 1), y, "o-", ms=2.5, lw=1.2, color=colours[L], label=f"L={L}")
        ax.axhline(1.0, color="k", ls="--", lw=1, label="rank collapse (cos = 1)")
        spec = REGISTRY.get(block)
        if spec is not None and spec.predictions.identity_attention:
            y0 = result["results"][block][str(max(depths))]["cosine_similarity"]["mean"][0]
            if y0 is not None:
                ax.axhline(y0, color="tab:blue", ls=":", lw=1, label="input (shaped attn = identity at init)")
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.05)
        ax.set_title(block)
        ax.set_xlabel("layer l (0 = embedding output)")
        ax.set_ylabel("mean pairwise cosine similarity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(
        "Token cosine similarity per layer at init, as measured (1 is rank collapse)\n" + _title(result),
        fontsize=9,
    )
    return save_figure(fig, path)


def plot_all(result: dict, out_dir) -> dict[str, str]:
    """Every figure of FIGURES into `out_dir`; returns {figure name: path}."""
    out_dir = os.fspath(out_dir)
    return {
        "hidden_norms": plot_hidden_norms(result, os.path.join(out_dir, FIGURES["hidden_norms"])),
        "grad_norms": plot_grad_norms(result, os.path.join(out_dir, FIGURES["grad_norms"])),
        "last_ffn_grad": plot_last_ffn_grad(result, os.path.join(out_dir, FIGURES["last_ffn_grad"])),
        "cosine_similarity": plot_cosine(result, os.path.join(out_dir, FIGURES["cosine_similarity"])),
        "model_update": plot_model_update(result, os.path.join(out_dir, FIGURES["model_update"])),
    }
