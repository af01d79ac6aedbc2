"""`write_report(DIR)`: read the runs of a sweep, draw the figures, write report.html and report.md."""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import UserError
from blocklab.reporting import downstream
from blocklab.reporting.analysis import Target, smoothing_window
from blocklab.reporting.factors import factor_sections
from blocklab.reporting.parts import Figure, Part, Section, build_part, loss_sections, split
from blocklab.reporting.plan import check_plan, mark_changed, plan_rows, refusal, withhold
from blocklab.reporting.runs import Run, load_runs
from blocklab.reporting.settings import shared_settings
from blocklab.reporting.stream import stream_sections
from blocklab.reporting.sweep_sections import gains_section, probe_section
from blocklab.reporting.verdicts import FIGURES as VERDICT_FIGURES
from blocklab.reporting.verdicts import read_verdicts, verdict_sections

__all__ = ["Figure", "Part", "Report", "Section", "build_report", "generate_report", "write_report"]

FIGURES_DIR = "figures"
# The figures this module writes into figures/ (removed before each report, so none goes stale); an
# experiment's loss figures carry its name (loss_vs_step_he.png).
_OWN = (
    "loss_vs_step*.png",
    "loss_vs_time*.png",
    "eval_loss*.png",
    "warmup_heatmap*.png",
    "gains_*.png",
    "probes_*.png",
    "bleu*.png",
    "grad_norms_training*.png",
    "stream_*.png",
    downstream.FIGURE,
    *VERDICT_FIGURES,
)


@dataclass
class Report:
    root: Path
    title: str
    description: str
    meta: list[tuple[str, str]]
    parts: list[Part]  # one per experiment of the sweep; one in all for a sweep without experiments
    notes: list[str]
    sections: list[Section]  # page order; a Section's `part` names the Part it belongs to
    shared: dict = field(default_factory=dict)  # settings every run shares (settings.shared_settings)
    plan: list[tuple[str, str]] = field(default_factory=list)  # the runs against sweep.json's plan (plan.plan_rows)
    html_path: Path | None = None
    md_path: Path | None = None

    @property
    def experiments(self) -> bool:
        """The sweep names its experiments: the page has one part per experiment, each with its heading."""
        return any(p.id for p in self.parts)

    @property
    def runs(self) -> list[Run]:
        return [r for p in self.parts for r in p.runs]

    @property
    def rows(self) -> list[dict]:
        return [r for p in self.parts for r in p.rows]

    @property
    def group_rows(self) -> list[dict]:  # one per seed group
        return [r for p in self.parts for r in p.group_rows]

    @property
    def target(self) -> Target:
        if not self.experiments:
            return self.parts[0].target
        return Target(None, "per-experiment", "Each experiment has its own target loss, given under its table.")

    @property
    def seeded(self) -> bool:
        """True when some run was repeated over seeds: the report leads with the groups' mean and spread."""
        return any(p.seeded for p in self.parts)

    @property
    def table_md(self) -> str:
        """The runs table; with experiments one per experiment, under its title and above its target."""
        if not self.experiments:
            return self.parts[0].table_md
        return "\n\n".join(f"{p.title}\n\n{p.table_md}\n\n{p.target.note}" for p in self.parts)

    @property
    def group_table_md(self) -> str:
        if not self.experiments:
            return self.parts[0].group_table_md
        return "\n\n".join(f"{p.title}\n\n{p.group_table_md}" for p in self.parts if p.seeded)


def machine_description() -> str:
    """CPU (and GPU) of this machine: the one drawing the report."""
    from blocklab.bench.machine import cpu_model

    text = f"{cpu_model()} ({os.cpu_count()} logical CPUs)"
    try:
        import torch

        if torch.cuda.is_available():
            text = f"{torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} GPU); host {text}"
    except Exception:  # noqa: BLE001 - a broken CUDA set-up must not stop a report
        pass
    return text


def _distinct(texts) -> str:
    seen = []
    for t in texts:
        if t not in seen:
            seen.append(t)
    return "; ".join(seen)


def _run_machines(runs: list[Run]) -> tuple[str, str] | None:
    """(machine, software) the runs trained on and with, from their summary.json (runs trained on a GPU machine
    and reported on a laptop name the GPU machine); None when no run recorded them."""
    ms = [r.summary.machine for r in runs if r.summary]
    ms = [m for m in ms if isinstance(m, dict)]
    if not ms:
        return None
    hosts = (f"{m.get('cpu')} ({m.get('cpu_count')} logical CPUs)" for m in ms)
    machines = _distinct(f"{m['gpu']}; host {h}" if m.get("gpu") else h for m, h in zip(ms, hosts))
    software = _distinct(f"torch {m.get('torch')}, Python {m.get('python')}" for m in ms)
    if len(ms) < len(runs):
        machines += f" ({len(runs) - len(ms)} of {len(runs)} runs did not record theirs)"
    return machines, software


def _run_devices(runs: list[Run]) -> str:
    seen = []
    for r in runs:
        s = r.summary
        if s and s.device:
            text = f"{s.device} x{s.world_size or 1}, {s.precision or 'fp32'}"
            if text not in seen:
                seen.append(text)
    return "; ".join(seen) or "unknown (no summary.json yet)"


def _meta(root: Path, runs: list[Run], sweep: dict) -> list[tuple[str, str]]:
    import torch

    from blocklab import __version__

    n = len(runs)
    counts = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    meta = [
        ("Generated", _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("Folder", str(root.resolve())),
        ("Runs", f"{n}: " + ", ".join(f"{v} {k}" for k, v in counts.items())),
        ("Runs trained on", _run_devices(runs)),
    ]
    here = f"torch {torch.__version__}, blocklab {__version__}, Python {platform.python_version()}"
    trained = _run_machines(runs)
    if trained is None:
        meta += [("Machine", f"{machine_description()} (this report's; the runs did not record theirs)")]
        meta += [("Software", here)]
    else:
        meta += [("Machine", trained[0]), ("Software", trained[1])]
        meta += [("Report drawn on", f"{machine_description()}, {here}")]
    if sweep.get("expected_cost"):
        meta.insert(3, ("Expected cost", str(sweep["expected_cost"])))
    tuning = sweep.get("tuning")
    if isinstance(tuning, list) and tuning:  # load_runs left them out of the tables: say where they are
        meta.insert(
            3,
            (
                "Tuning runs",
                f"{len(tuning)}, not in the runs tables: their scores are drawn against "
                "the tuned value, from verdicts.json",
            ),
        )
    return meta


def _notes(runs: list[Run], target: Target | None) -> list[str]:
    """The notes under the runs table; `target`: the report's one target (None: each experiment has its own,
    given in its part, against its own reference run)."""
    windows = sorted({smoothing_window(len(r.series("loss")[1])) for r in runs if r.rows})
    notes = [
        target.note
        if target
        else "Each experiment is reported on its own: its runs, its target loss (the final "
        "loss of its own reference run) and its figures.",
        "Steps to target: the first logged step at which the smoothed training loss is at or below the target "
        '("not reached": never, within the steps the run has logged).',
        "Training loss: each logged point is the mean loss over the steps since the previous one; curves, the "
        '"final train loss (smoothed)" column and steps to target use a trailing moving average over 1/20 of a '
        f"run's logged points (at most 50; here {'/'.join(map(str, windows)) or '1'}); the raw values are drawn "
        "faint. summary.json's final_loss is the last logged value, unsmoothed, so the two differ.",
        "Tokens/s: training throughput (forward, backward and optimizer step; evaluation and checkpoints "
        "excluded), from summary.json, or the median of the logged values for a run without one.",
        "Status: completed, diverged (non-finite loss or far above the initial loss; the step is shown), "
        "stalled (the loss stayed at the training split's unigram entropy, drawn dotted on the loss plots: the "
        "run learned only token frequencies; the step is shown), interrupted, or running/unknown (no "
        "summary.json: still running or killed).",
    ]
    if any(r.seed is not None for r in runs):
        notes.insert(
            0,
            "Seeds: each setting was run once per seed; the first table gives the mean ± the sample "
            "standard deviation over the seeds (n - 1), the curves the mean with a band from the "
            "lowest to the highest seed, each seed drawn thin. The second table lists every run.",
        )
    shared = sorted({int((r.summary and r.summary.concurrent_runs) or 1) for r in runs} - {1})
    if shared:
        notes.append(
            f"Tokens/s and wall-clock: these runs trained {' or '.join(map(str, shared))} at a time "
            "(compare --jobs), each on its share of the cores, so they are not speed measurements; "
            "`blocklab bench` measures speed side by side."
        )
    skipped = [f"{r.label}: {r.skipped_lines}" for r in runs if r.skipped_lines]
    if skipped:
        notes.append(
            "Unreadable metrics.jsonl lines skipped (a half-written last line from a kill or a run "
            "still writing): " + ", ".join(skipped) + "."
        )
    return notes


def _clean_figures(fig_dir: Path) -> None:
    if fig_dir.is_dir():
        for pattern in _OWN:
            for p in fig_dir.glob(pattern):
                p.unlink(missing_ok=True)


def build_report(
    root: str | Path, target_loss: float | None = None, allow_changed: bool = False, probes_ready=None
) -> Report:
    """Read DIR, compute the tables and draw every figure into DIR/figures/ (writes no page). A run whose
    settings differ from sweep.json's plan is refused (UserError), or with `allow_changed` reported marked.
    `probes_ready`, when given, is called before DIR/probes is read: it returns once the init probes are there."""
    if target_loss is not None and (not math.isfinite(target_loss) or target_loss <= 0):
        raise UserError(f"--target-loss {target_loss!r} is not valid; give a positive loss value")
    root = Path(root)
    runs, sweep = load_runs(root)
    plan = check_plan(root, sweep)
    if plan.changed and not allow_changed:
        raise UserError(refusal(plan, root))
    mark_changed(runs, plan)
    fig_dir = root / FIGURES_DIR
    _clean_figures(fig_dir)
    shared = shared_settings(runs)
    parts = [build_part(*p, target_loss, shared) for p in split(runs, sweep)]
    # DIR/verdicts.json: each experiment's verdicts lead its part, before its loss figures (whose captions
    # then compare nothing: the verdict table is the one place that does)
    verdicts = withhold(read_verdicts(root), plan)
    placed, claims_at_end = verdict_sections(verdicts, {p.id for p in parts if p.id}, fig_dir)
    sections = [] if any(p.id for p in parts) else placed.pop(None, [])
    for p in parts:
        sections += placed.pop(p.id, []) + loss_sections(p, fig_dir, verdicts=verdicts.present)
        sections += stream_sections(p, fig_dir)
    sections += placed.pop(None, [])  # experiments of verdicts.json that no part of the sweep holds
    sections += factor_sections(verdicts.data or {}, fig_dir)  # each factor's interactions, after its levels
    runs = [r for p in parts for r in p.runs]  # report order: experiment, then family and block
    existing = [r for r in runs if r.exists]

    down = _downstream_section(root, existing, sweep, fig_dir)
    if down:
        sections.append(down)
    # The gains before the probes: compare computes them meanwhile (experiments/probe_job.py); the page's order stays.
    gains = gains_section(existing, fig_dir)
    if probes_ready is not None:
        probes_ready()
    probes = probe_section(root, fig_dir)
    sections += ([probes] if probes else []) + [gains]
    if claims_at_end:  # claims that name no experiment of verdicts.json
        sections.append(claims_at_end)

    title = sweep.get("name") or (root.resolve().name if root.name in ("", ".") else root.name)
    one = None if any(p.id for p in parts) else parts[0].target
    notes = _notes(runs, one) + ([verdicts.note] if verdicts.note else [])
    found = plan_rows(plan, {r.name for r in runs if r.exists})
    meta = _meta(root, runs, sweep)
    meta[3:3] = found  # beside the count of runs, where a reader looks first
    return Report(
        root=root,
        title=f"blocklab report: {title}",
        description=str(sweep.get("description") or ""),
        meta=meta,
        parts=parts,
        notes=notes,
        sections=sections,
        shared=shared,
        plan=found,
    )


def _downstream_section(root: Path, runs: list[Run], sweep: dict, fig_dir: Path) -> Section | None:
    stage = sweep.get("finetune")
    if not stage:
        return None
    seeds = ", ".join(map(str, stage["seeds"]))
    intro = (
        f"Each pre-trained encoder fine-tuned on {', '.join(stage['tasks'])} ({stage['epochs']:g} epochs, "
        f"seeds {seeds}; blocklab finetune's recipe). A task's cell is its validation score, mean ± sd over "
        "the seeds that did not diverge; `score` averages the tasks; `failed` counts fine-tuning runs that "
        "diverged (non-finite or exploding loss)."
    )
    if not stage.get("steps"):
        pre = downstream.table(root, runs, stage, sweep.get("reference"), sweep.get("target_run"))
        if not pre:
            return Section("downstream", "Downstream: fine-tuning", [intro, "No fine-tuning results yet."])
        speed = (
            "`speed`: pre-training tokens/s relative to the reference run, measured in this sweep's runs "
            "(one after another on this machine, so a noisy figure; `blocklab bench` measures it side by side)."
        )
        return Section("downstream", "Downstream: fine-tuning", [intro, speed], pre=pre)
    curves, baseline = downstream.along_pretraining(root, runs, stage)
    path = downstream.plot_along(curves, runs, fig_dir / downstream.FIGURE, baseline)
    figs = (
        [
            Figure(
                path,
                "Downstream score against pre-training steps",
                " ".join(downstream.reach_sentences(curves, baseline)),
            )
        ]
        if path
        else []
    )
    return Section(
        "downstream",
        "Downstream: fine-tuning along pre-training",
        [intro + f" Checkpoints of steps {', '.join(map(str, stage['steps']))}."]
        + ([] if figs else ["No fine-tuning results yet."]),
        figures=figs,
    )


def generate_report(
    root: str | Path, target_loss: float | None = None, allow_changed: bool = False, probes_ready=None
) -> Report:
    """build_report, then write DIR/report.html (self-contained) and DIR/report.md; returns the Report."""
    from blocklab.reporting.render import to_html, to_markdown

    report = build_report(root, target_loss, allow_changed, probes_ready)
    report.html_path, report.md_path = report.root / "report.html", report.root / "report.md"
    write_atomic(report.html_path, to_html(report))
    write_atomic(report.md_path, to_markdown(report))
    return report


def write_report(root: str | Path, target_loss: float | None = None, probes_ready=None) -> tuple[Path, Path]:
    """Write DIR/report.html and DIR/report.md (figures in DIR/figures/); returns (html_path, md_path)."""
    report = generate_report(root, target_loss, probes_ready=probes_ready)
    return report.html_path, report.md_path
