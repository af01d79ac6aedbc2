"""Each layer's gradient norm per weight type during training: a figure and a table
(docs/models.md#signal-propagation-probes).

Xiong et al. (Fig. 3) compare the gradient norm of every weight per layer at initialisation and after
warm-up: Post-LN's grow towards the output at init and shrink after warm-up, which is what makes a
large learning rate safe then; Pre-LN's are flat throughout. The trainer logs them as
`grad/L{l}.{role}` (decoder blocks of translation runs: `grad/D{l}.{role}`, see probes/grads.py).

Three moments per run, each a logged row:
- init: the first row with gradient norms. The trainer always measures step 1, whose gradient is taken
  at the initial weights (before any update), so "init" means step 1's gradient, the network at init;
- after warm-up: the first row at a step >= `train.warmup_steps` (none for a run without warm-up);
- end: the last row with gradient norms.
Rows, and so layers, are those the run logged; nothing is interpolated.
"""

from __future__ import annotations

import math
from pathlib import Path

from blocklab.reporting.figures import group_styles, save_figure
from blocklab.reporting.runs import Run

PREFIX = "grad/"
ROLE_ORDER = ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2")
MOMENTS = ("init", "warmup", "end")
MOMENT_TITLES = {
    "init": "init (first logged step: step 1)",
    "warmup": "after warm-up (first logged step >= warm-up)",
    "end": "end (last logged step)",
}
FIGURE = "grad_norms_training.png"


def _split(key: str, stack: str) -> tuple[int, str] | None:
    """'grad/L3.mlp.fc2' -> (3, 'mlp.fc2') for stack 'L'; None for other keys."""
    if not key.startswith(PREFIX + stack):
        return None
    layer, _, role = key[len(PREFIX) + len(stack) :].partition(".")
    return (int(layer), role) if layer.isdigit() and role else None


def grad_rows(run: Run, stack: str = "L") -> list[dict]:
    """The run's logged rows that hold gradient norms of `stack` ('L' blocks, 'D' decoder blocks)."""
    return [r for r in run.rows if any(_split(k, stack) for k in r)]


def warmup_steps(run: Run) -> int | None:
    w = run.cfg("train", "warmup_steps")
    return w if isinstance(w, int) and not isinstance(w, bool) else None


def moments(run: Run, stack: str = "L") -> dict[str, dict | None]:
    """{moment: row or None} (module docstring); {} when the run logged no gradient norms."""
    rows = grad_rows(run, stack)
    if not rows:
        return {}
    w = warmup_steps(run)
    after = next((r for r in rows if r["step"] >= w), None) if w else None
    return {"init": rows[0], "warmup": after, "end": rows[-1]}


def profile(row: dict, role: str, stack: str = "L") -> tuple[list[int], list[float]]:
    """(layers, norms) of one weight role in one row, by layer; non-finite or zero norms are left out
    (the log axis cannot show them; a diverged step's inf is in the table, not the figure)."""
    found = {}
    for k, v in row.items():
        hit = _split(k, stack)
        if hit and hit[1] == role and isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            found[hit[0]] = float(v)
    layers = sorted(found)
    return layers, [found[layer] for layer in layers]


def roles(runs: list[Run], stack: str = "L") -> list[str]:
    """Every weight role the runs logged: Xiong's order first, then any other by name."""
    found = {hit[1] for r in runs for row in grad_rows(r, stack) for k in row for hit in [_split(k, stack)] if hit}
    return [r for r in ROLE_ORDER if r in found] + sorted(found - set(ROLE_ORDER))


def plot_grad_norms_training(
    runs: list[Run], path: Path, stack: str = "L", only: list[str] | None = None
) -> Path | None:
    """Gradient norm against layer index, one row of panels per weight role (`only`: these roles) and
    one column per moment (init, after warm-up, end), one line per seed group's run in its colour;
    log y, shared along a row so a role's moments compare directly. None when no run has norms."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    drawn = [r for r in runs if moments(r, stack)]
    names = [x for x in roles(drawn, stack) if only is None or x in only]
    if not drawn or not names:
        return None
    cols = [m for m in MOMENTS if m != "warmup" or any(moments(r, stack)["warmup"] for r in drawn)]
    fig = Figure(figsize=(3.4 * len(cols) + 0.6, 2.3 * len(names) + 1.0))
    axes = fig.subplots(len(names), len(cols), squeeze=False, sharey="row")
    styles = group_styles(drawn)
    labelled = set()
    for r in drawn:
        m, (colour, ls) = moments(r, stack), styles[r.name]
        steps = "/".join(str(m[c]["step"]) if m[c] else "-" for c in cols)
        no_warmup = ", no warm-up" if "warmup" in cols and not warmup_steps(r) else ""
        label = None if r.group in labelled else f"{r.group_label} [{r.block}] (steps {steps}{no_warmup})"
        labelled.add(r.group)
        for i, role in enumerate(names):
            for j, c in enumerate(cols):
                xs, ys = profile(m[c], role, stack) if m[c] else ([], [])
                if xs:  # the group's legend entry goes on its first line, wherever that is
                    axes[i][j].plot(xs, ys, color=colour, ls=ls, marker="o", ms=3, lw=1.4, label=label)
                    label = None
    prefix = "decoder " if stack == "D" else ""
    for i, role in enumerate(names):
        for j, c in enumerate(cols):
            ax = axes[i][j]
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{prefix}{role}: {MOMENT_TITLES[c]}", fontsize=8)
            if i == len(names) - 1:
                ax.set_xlabel("layer (block index)")
            if j == 0:
                ax.set_ylabel("|dLoss/dW| (Frobenius)", fontsize=8)
    entries = [e for ax in axes.flat for e in zip(*ax.get_legend_handles_labels())]
    fig.legend(*zip(*entries), loc="upper center", fontsize=7, ncol=min(2, len(entries)), bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(
        "Gradient norm of each weight per layer during training, as measured (to compare with Xiong et al.\n"
        "Fig. 3; the run's steps for each column in the legend)",
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, Path(path))


def grad_norm_ratios(runs: list[Run], role: str = "mlp.fc2", stack: str = "L") -> list[dict]:
    """Per run with gradient norms: the last layer's `role` gradient norm over the first layer's at each
    moment (> 1: growing toward the output, as Post-LN at init). {"run", "block", "layers",
    "warmup_steps", and per moment `{moment}_step`, `{moment}_ratio`}; None where missing."""
    out = []
    for r in runs:
        m = moments(r, stack)
        if not m:
            continue
        row = {
            "run": r.label,
            "block": r.block,
            "layers": len(profile(m["end"], role, stack)[0]) or None,
            "warmup_steps": warmup_steps(r),
        }
        for c in MOMENTS:
            xs, ys = profile(m[c], role, stack) if m[c] else ([], [])
            row[f"{c}_step"] = m[c]["step"] if m[c] else None
            row[f"{c}_ratio"] = ys[-1] / ys[0] if len(xs) >= 2 else None
        out.append(row)
    return out


def _cell(row: dict, c: str) -> str:
    if row[f"{c}_step"] is None:  # only "warmup" can be missing
        return {0: "no warm-up", None: "-"}.get(row["warmup_steps"], "not reached")
    ratio = row[f"{c}_ratio"]
    return f"{ratio:.3g} (step {row[f'{c}_step']})" if ratio is not None else f"- (step {row[f'{c}_step']})"


def grad_norm_table_md(runs: list[Run], role: str = "mlp.fc2", stack: str = "L") -> str | None:
    """A Markdown table of `grad_norm_ratios`, for the report; None when no run has gradient norms."""
    rows = grad_norm_ratios(runs, role, stack)
    if not rows:
        return None
    lines = [
        f"| run | block | layers | {role} last/first layer: init | after warm-up | end |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['run']} | {r['block']} | {r['layers'] or '-'} | " + " | ".join(_cell(r, c) for c in MOMENTS) + " |"
        for r in rows
    ]
    return "\n".join(lines)
