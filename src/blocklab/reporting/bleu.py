"""BLEU against steps for translation runs (the `bleu` values of metrics.jsonl), and one sentence on them."""

from __future__ import annotations

from pathlib import Path

from blocklab.reporting.figures import new_figure, place_legend, plot_eval_series, save_figure
from blocklab.reporting.runs import Run
from blocklab.run_summary import RunSummary


def plot_bleu(runs: list[Run], path: Path) -> Path | None:
    """BLEU of each run's evaluations against the training step; None when no run logged BLEU."""
    fig, ax = new_figure()
    n = plot_eval_series(ax, runs, "bleu")
    if not n:
        return None  # a matplotlib Figure outside pyplot: nothing to close
    ax.set_xlabel("training step")
    ax.set_ylabel("BLEU (sacrebleu, validation pairs, greedy)")
    ax.set_title("BLEU against steps", fontsize=10)
    ax.grid(alpha=0.3)
    place_legend(ax, n)
    return save_figure(fig, path)


def bleu_sentence(runs: list[Run]) -> str:
    """The best and the worst final BLEU among the runs that logged it."""
    finals = []
    for r in runs:
        xs, ys = r.series("bleu")
        if ys:
            finals.append((ys[-1], max(ys), r.label, r.status))
    if not finals:
        return ""
    finals.sort(reverse=True)
    top, low = finals[0], finals[-1]
    text = f"Highest final BLEU: {top[0]:.2f} ({top[2]})"
    if len(finals) > 1:
        text += f"; lowest: {low[0]:.2f} ({low[2]}, {low[3]})"
    return text + ". BLEU is measured at each evaluation on the same validation pairs, decoded greedily."


def bleu_table(runs: list[Run]) -> str | None:
    """One line per translation run: status, final and best BLEU (summary.json), final evaluation loss."""
    lines = []
    for r in runs:
        s = r.summary or RunSummary()
        xs, ys = r.series("bleu")
        if not ys and s.final_bleu is None:
            continue
        final = s.final_bleu if s.has("final_bleu") else ys[-1] if ys else None
        best = s.best_bleu if s.has("best_bleu") else max(ys) if ys else None
        ev = s.final_eval_loss
        lines.append(f"{r.label:<32} {r.status:<12} {_num(final):>10} {_num(best):>9} {_num(ev, '.3f'):>15}")
    if not lines:
        return None
    return f"{'run':<32} {'status':<12} {'final BLEU':>10} {'best BLEU':>9} {'final eval loss':>15}\n" + "\n".join(
        lines
    )


def _num(x, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)
