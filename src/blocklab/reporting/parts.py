"""A sweep's experiments: each is one part of the report, with its own runs, tables, target and loss figures.

sweep.json's `experiments` ({name: {title, description, target_run}}, written by experiments/sweep.py)
and each run's `experiment` tag split the runs. Runs that name no experiment of the sweep (a run folder
added by hand) make a last part, "Other runs". A sweep without experiments is one part holding every
run, which the report renders as it always has: no part heading, figure files without a suffix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from blocklab.reporting import claims
from blocklab.reporting import figures as F
from blocklab.reporting.analysis import Target, choose_target, markdown_table, run_row
from blocklab.reporting.bleu import bleu_sentence, bleu_table, plot_bleu
from blocklab.reporting.gradnorms import grad_norm_table_md, plot_grad_norms_training
from blocklab.reporting.groups import group_markdown_table, group_row, group_runs
from blocklab.reporting.heatmap import plot_warmup_heatmap
from blocklab.reporting.runs import Run, family_order
from blocklab.reporting.settings import shared_settings, usual_settings, varying_settings

# The weight types whose per-layer gradient norms the report draws (Xiong et al. Fig. 3 shows these four).
GRAD_ROLES = ["attn.v", "attn.proj", "mlp.fc1", "mlp.fc2"]
GRAD_INTRO = (
    "Xiong et al. (Sec. 3.3, Fig. 3) find Post-LN's gradients growing toward the output at init and "
    "shrinking after warm-up, so that a large rate becomes safe; Pre-LN's are flat throughout. The "
    "table gives the last layer's mlp.fc2 gradient norm over the first layer's at each moment "
    "(init: step 1, whose gradient is taken at the initial weights)."
)
# The loss figures' caption when DIR/verdicts.json exists: what is drawn, and where the comparison is.
VERDICT_CAPTION = (
    "Each group's final runs, drawn as measured. Which group is better, by how much and how sure "
    "is for the verdict table to say (difference, 95% interval, seeds, corrected test), not this "
    "figure."
)
OTHER = "_other"  # the part of untagged runs: experiments/sweep_tables.py refuses experiment names that start with "_"


@dataclass
class Figure:
    path: Path
    title: str
    caption: str = ""


@dataclass
class Table:
    """A table of text cells, drawn as an HTML table on the page and with pipes in Markdown; `notes` read under it."""

    id: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    numeric: tuple[int, ...] = ()  # the columns (indices) of numbers, right-aligned


@dataclass
class Section:
    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    pre: str | None = None  # a preformatted block (the probes' summary table)
    part: str | None = None  # the Part.id it belongs to; None: about the whole sweep
    tables: list[Table] = field(default_factory=list)  # after the figures
    items: list[str] = field(default_factory=list)  # a bulleted list, after the tables


@dataclass
class Part:
    id: str  # the experiment's name; "" for a sweep without experiments
    title: str
    description: str
    runs: list[Run]  # by family, then block (runs.family_order)
    target: Target
    rows: list[dict]  # one per run
    group_rows: list[dict]  # one per seed group
    pairs: list = field(default_factory=list)  # (Group, group row), what the sentences under figures read
    shared: dict = field(default_factory=dict)  # settings its runs share beyond those every run shares
    usual: dict = field(default_factory=dict)  # settings most of its runs have; rows name theirs where they differ

    @property
    def seeded(self) -> bool:
        """True when some run was repeated over seeds: the part leads with the groups' mean and spread."""
        return any(r["n"] > 1 for r in self.group_rows)

    @property
    def table_md(self) -> str:
        return markdown_table(self.rows)

    @property
    def group_table_md(self) -> str:
        return group_markdown_table(self.group_rows)

    def name(self, base: str, sep: str = "_") -> str:
        """`base` made this part's (a figure file or a section id): unchanged for a sweep without experiments."""
        if not self.id:
            return base
        return f"{base}{sep}{self.id if self.id == OTHER else F.slug(self.id)}"  # slug() would strip OTHER's "_"


def experiments_of(sweep: dict) -> dict[str, dict]:
    """sweep.json's experiments, {name: {"title", "description", "target_run"}}; {} when it has none or they
    are unreadable (a hand-edited file: the report then shows one part rather than fail)."""
    table = sweep.get("experiments")
    if not isinstance(table, dict):
        return {}
    out = {}
    for name, meta in table.items():
        if isinstance(name, str) and name and name != OTHER:
            meta = meta if isinstance(meta, dict) else {}
            out[name] = {
                "title": str(meta.get("title") or name),
                "description": str(meta.get("description") or ""),
                "target_run": meta.get("target_run"),
            }
    return out


def split(runs: list[Run], sweep: dict) -> list[tuple[str, str, str, str | None, list[Run]]]:
    """[(id, title, description, target_run, runs)], one per experiment with runs, in the sweep's order."""
    exps = experiments_of(sweep)
    if not exps:
        return [("", "", "", sweep.get("target_run"), runs)]
    out = [
        (name, m["title"], m["description"], m["target_run"], [r for r in runs if r.experiment == name])
        for name, m in exps.items()
    ]
    other = [r for r in runs if r.experiment not in exps]
    out.append((OTHER, "Other runs", "Runs that name no experiment of the sweep.", None, other))
    return [p for p in out if p[4]]


def build_part(
    pid: str,
    title: str,
    description: str,
    target_run: str | None,
    runs: list[Run],
    target_loss: float | None,
    known: dict,
) -> Part:
    """The part's table rows (its own target and per-row settings) and seed groups; `known`: the settings
    every run of the report shares, shown once above all parts."""
    runs = family_order(runs)
    target = choose_target(runs, target_loss, reference=target_run)
    settings = varying_settings(runs)
    rows = []
    for r in runs:
        row = run_row(r, target)
        row["settings"] = settings.get(r.name, "")
        rows.append(row)
    done = [(r, row) for r, row in zip(runs, rows) if r.exists]
    pairs = [(g, group_row(g)) for g in group_runs([r for r, _ in done], [row for _, row in done])]
    shared = shared_settings(runs, known) if pid else {}
    return Part(
        pid, title, description, runs, target, rows, [row for _, row in pairs], pairs, shared, usual_settings(runs)
    )


def _fig(path, title, caption="") -> list[Figure]:
    return [Figure(Path(path), title, caption)] if path else []


def loss_sections(part: Part, fig_dir: Path, verdicts: bool = False) -> list[Section]:
    """The part's training-loss, evaluation-loss, BLEU and warm-up heat-map sections, its figures drawn. With
    `verdicts` (the sweep has DIR/verdicts.json) no caption compares the groups: the verdict table does that,
    with intervals and tests, and a second, untested comparison beside it could only disagree with it."""
    existing = [r for r in part.runs if r.exists]
    pairs, tag = part.pairs, part.id

    def say(sentence, *args) -> str:
        return VERDICT_CAPTION if verdicts else sentence(*args)

    loss = Section(
        part.name("training-loss", "-"),
        "Training loss",
        part=tag,
        figures=(
            _fig(
                F.plot_train_loss(existing, fig_dir / f"{part.name('loss_vs_step')}.png", "step", part.target),
                "Training loss against steps",
                say(claims.loss_sentence, pairs),
            )
            + _fig(
                F.plot_train_loss(existing, fig_dir / f"{part.name('loss_vs_time')}.png", "elapsed_s", part.target),
                "Training loss against wall-clock time",
                say(claims.time_sentence, pairs),
            )
        ),
    )
    if not loss.figures:
        loss.paragraphs.append("No training loss logged yet.")
    ev = Section(
        part.name("eval-loss", "-"),
        "Evaluation loss",
        part=tag,
        figures=_fig(
            F.plot_eval_loss(existing, fig_dir / f"{part.name('eval_loss')}.png"),
            "Evaluation loss against steps",
            say(claims.loss_sentence, pairs, "final_eval_loss", "final evaluation loss"),
        ),
    )
    if not ev.figures:
        ev.paragraphs.append("No evaluation loss logged yet.")
    out = [loss, ev]
    bleu = plot_bleu(existing, fig_dir / f"{part.name('bleu')}.png")  # translation runs only
    if bleu:
        out.append(
            Section(
                part.name("bleu", "-"),
                "BLEU",
                part=tag,
                pre=bleu_table(existing),
                figures=_fig(bleu, "BLEU against steps", bleu_sentence(existing)),
            )
        )
    grads = plot_grad_norms_training(existing, fig_dir / f"{part.name('grad_norms_training')}.png", only=GRAD_ROLES)
    if grads:
        out.append(
            Section(
                part.name("grad-norms", "-"),
                "Gradient norms per layer during training",
                part=tag,
                paragraphs=[GRAD_INTRO],
                pre=grad_norm_table_md(existing),
                figures=_fig(
                    grads,
                    "Gradient norm per layer at init, after warm-up and at the end",
                    "Each weight type's gradient norm against the layer, before clipping; log scale.",
                ),
            )
        )
    heat = plot_warmup_heatmap(pairs, fig_dir / f"{part.name('warmup_heatmap')}.png")
    if heat:
        out.append(
            Section(
                part.name("warmup-heatmap", "-"),
                "Warm-up and learning rate",
                part=tag,
                figures=_fig(
                    heat, "Final loss over warm-up x learning rate, per block", say(claims.heatmap_sentence, pairs)
                ),
            )
        )
    return out
