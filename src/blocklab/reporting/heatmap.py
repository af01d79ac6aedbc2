"""Warm-up x learning rate: a heat map of the final loss per block (the `warmup` presets).

Each cell is one seed group: its mean final (smoothed) training loss, which every run has, even one
that stalled before its first evaluation. Diverged cells are grey and marked "div"; a cell with a
stalled seed is marked "stall". One colour scale for every panel, so blocks compare cell by cell.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def cell_value(row: dict) -> float | None:
    return row.get("final_loss")


def warmup_grid(groups) -> dict | None:
    """{panel: {(warmup_steps, lr): (value, statuses)}} when the groups vary over both warm-up and learning
    rate; None otherwise. A panel is a block, or "block, optimizer" where the optimizer varies too.
    `groups` are (Group, group_row) pairs."""
    grid: dict = {}
    groups = list(groups)
    # Xiong et al.'s SGD arm shares rates with the Adam runs: one panel per block and optimizer then.
    optimizers = {g.runs[0].cfg("train", "optimizer") for g, _ in groups}
    for g, row in groups:
        run = g.runs[0]
        w, lr = run.cfg("train", "warmup_steps"), run.cfg("train", "lr")
        if w is None or lr is None:
            continue
        panel = f"{g.block}, {run.cfg('train', 'optimizer')}" if len(optimizers) > 1 else g.block
        grid.setdefault(panel, {})[(w, lr)] = (cell_value(row), row["statuses"])

    def crossed(cells) -> bool:  # at least a 2 x 2 grid: both settings varied together
        return len(cells) >= 4 and len({w for w, _ in cells}) >= 2 and len({lr for _, lr in cells}) >= 2

    return grid if any(crossed(cells) for cells in grid.values()) else None


def plot_warmup_heatmap(groups, path: Path) -> Path | None:
    from matplotlib.figure import Figure

    from blocklab.reporting.figures import save_figure

    grid = warmup_grid(groups)
    if grid is None:
        return None
    warmups = sorted({w for cells in grid.values() for w, _ in cells})
    lrs = sorted({lr for cells in grid.values() for _, lr in cells})
    values = [
        v
        for cells in grid.values()
        for v, st in cells.values()
        if v is not None and math.isfinite(v) and "diverged" not in st
    ]
    if not values:
        return None
    vmin, vmax = min(values), max(values)
    n = len(grid)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.3 * cols + 0.8, 2.9 * rows + 0.6))
    axes = np.array(fig.subplots(rows, cols, squeeze=False, gridspec_kw={"hspace": 0.55, "wspace": 0.4}))
    image = None
    for ax, (block, cells) in zip(axes.flat, grid.items()):
        data = np.full((len(warmups), len(lrs)), np.nan)
        for (w, lr), (v, st) in cells.items():
            if v is not None and "diverged" not in st:
                data[warmups.index(w), lrs.index(lr)] = v
        image = ax.imshow(
            np.ma.masked_invalid(data),
            cmap="viridis_r",
            vmin=vmin,
            vmax=max(vmax, vmin + 1e-6),
            aspect="auto",
            origin="lower",
        )
        ax.set_facecolor("0.8")
        for (w, lr), (v, st) in cells.items():
            i, j = warmups.index(w), lrs.index(lr)
            text = "div" if "diverged" in st else ("-" if v is None else f"{v:.2f}")
            if "stalled" in st:
                text += "\nstall"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=8,
                color="black" if v is None or "diverged" in st or v > (vmin + vmax) / 2 else "white",
            )
        ax.set_title(block, fontsize=10)
        ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs], fontsize=8)
        ax.set_yticks(range(len(warmups)), [str(w) for w in warmups], fontsize=8)
        ax.set_xlabel("learning rate", fontsize=8)
        ax.set_ylabel("warm-up steps", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.85, label="final loss (nats/token)")
    fig.suptitle("Final loss over warm-up x learning rate, per block (mean over seeds)", fontsize=10)
    return save_figure(fig, path)
