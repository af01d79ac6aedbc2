"""The secondary metrics of DIR/verdicts.json (BLEU, fine-tuning dev scores) as one table per experiment:
each group's mean at its best tuned value and its comparison with the reference, worded like the verdict
table (a verdict word always with its difference, interval, seeds and corrected p)."""

from __future__ import annotations

from blocklab.reporting.parts import Table
from blocklab.reporting.verdict_words import comparison_text, mean_text, seed_count
from blocklab.verdicts_record import Comparison, Experiment, Group, SecondaryMetric


def metric_name(metric: str) -> str:
    """ "final_bleu" -> "BLEU"; "finetune:wrong-operator" -> "wrong-operator (fine-tuned dev score)"."""
    if metric == "final_bleu":
        return "BLEU"
    if metric.startswith("finetune:"):
        return f"{metric.split(':', 1)[1]} (fine-tuned dev score)"
    if metric.startswith("eval:"):
        task, _, name = metric.split(":", 1)[1].partition("/")
        return f"{task}: {name.replace('_', ' ')} (lm-eval)"
    return metric.replace("_", " ")


def secondary_table(exp: Experiment | dict, tag: str) -> Table | None:
    exp = Experiment.of(exp)
    if not isinstance(exp.secondary, dict) or not exp.secondary:
        return None
    metrics = {k: SecondaryMetric.of(m) for k, m in exp.secondary.items()}
    groups = exp.groups or {}
    ref = exp.reference
    rows = []
    for metric, m in metrics.items():
        m_groups, comps = m.groups or {}, m.comparisons or {}
        ref_group = m_groups.get(ref) or Group()
        for name, g in m_groups.items():
            g = Group.of(g or {})
            if name == ref:
                vs = "reference"
            elif isinstance(comps.get(name), Comparison):
                vs = comparison_text(comps[name], seed_count(g), seed_count(ref_group), 2, False)
            else:
                vs = "no comparison recorded"
            label = Group.of(groups.get(name) or {}).label or name
            rows.append([metric_name(metric), str(label), mean_text(g, 2), vs])
    ref_label = Group.of(groups.get(ref) or {}).label or ref or "the reference"
    columns = [
        "metric",
        "group",
        "mean [95% interval] (seeds)",
        f"against {ref_label}: verdict, difference, family interval, p_holm",
    ]
    table = Table(f"secondary-table-{tag}", columns, rows)
    caps = [f"{metric_name(k)} {m.cap:.3g}" for k, m in metrics.items() if isinstance(m.cap, (int, float))]
    lower = [metric_name(k) for k, m in metrics.items() if m.lower_is_better]
    table.notes.append(
        (
            "Higher is better for each of these"
            if not lower
            else f"Lower is better for {', '.join(lower)}; higher for the others"
        )
        + ". Each final run is scored at its group's best value (chosen on the "
        "primary metric); a fine-tuning score is the mean over that run's fine-tuning seeds, one per pre-training "
        "seed. A run whose training failed, or that ends no better than the cap (BLEU: zero; a task: its "
        "majority-class score"
        + (f": {', '.join(caps)}" if caps else "")
        + "), failed: counted, never scored; an lm-eval score has no cap. Each metric is a family of its own for "
        "Holm's correction."
    )
    return table
