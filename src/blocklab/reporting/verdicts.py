"""DIR/verdicts.json (docs/verdicts.md) in the report: per experiment the score against the tuned value, the verdict
table with the numbers that say how small a difference the sweep can see, the frontier when it has sizes, and
the claims with their status.

This module reads, draws and words the verdicts; it computes none (experiments/verdicts.py does, and a
second computation here could only disagree with it). The file is read defensively: unreadable, it becomes a
note of the report; an experiment's entry that cannot be drawn becomes a paragraph saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from blocklab.reporting import figures as F
from blocklab.reporting import sensitivity as S
from blocklab.reporting.parts import Figure, Section
from blocklab.reporting.secondary_words import secondary_table
from blocklab.reporting.settings import setting_text
from blocklab.reporting.verdict_words import claim_text, decimals, frontier_table, numbers_note, verdict_table
from blocklab.verdicts_record import FILE, Claim, Experiment, Group, NotVerdicts, VerdictsFile
from blocklab.verdicts_record import read_verdicts as read_record

FIGURES = ("sensitivity_*.png", "frontier_*.png", "factor_*.png")  # what this module draws into figures/ (report._OWN)
SENSITIVITY_CAPTION = (
    "Line: each group's mean over its completed tuning seeds at each value; dots: each seed; x: a seed "
    "that failed (diverged or stalled: drawn at the cap; ended near the cap: at its score); band: lowest to "
    "highest seed; star: the group's best value among those every tuning seed completed (ties: the lower value)."
)
FRONTIER_CAPTION = (
    "Each point: a group at one size, at its own best tuned value; error bars: the 95% interval "
    "over its seeds; line: the power law fitted to its points."
)


@dataclass
class Verdicts:
    data: (
        VerdictsFile | None
    )  # the file's record (a JSON object given here is read into one); None: absent or unreadable
    note: str | None  # why it could not be read, for the report's notes
    present: bool  # the file exists, readable or not: the loss captions then compare nothing

    def __post_init__(self):
        self.data = VerdictsFile.of(self.data)

    @property
    def experiments(self) -> dict[str, Experiment]:
        return self.data.experiment_records if self.data is not None else {}

    @property
    def claims(self) -> list[Claim]:
        return self.data.claim_records if self.data is not None else []


def read_verdicts(root: Path) -> Verdicts:
    if not (Path(root) / FILE).exists():
        return Verdicts(None, None, False)
    try:
        return Verdicts(read_record(root), None, True)
    except NotVerdicts:
        return Verdicts(None, f"{FILE} holds no `experiments` table; no verdicts are shown.", True)
    except (OSError, ValueError) as e:  # half-written, or not JSON
        return Verdicts(None, f"{FILE} could not be read ({type(e).__name__}: {e}); no verdicts are shown.", True)


def family_size(v: Verdicts) -> int:
    """The size of the sweep's primary family (score and failure tests), as verdicts.json records it."""
    sizes = [exp.family_size for exp in v.experiments.values()]
    return max((x for x in sizes if isinstance(x, int)), default=0)


def _intro(exp: Experiment) -> str:
    tuned = exp.tuned or "the tuned setting"
    values = ", ".join(setting_text(v) for v in S.grid(exp))
    tuning = ", ".join(map(str, S.tuning_seeds(exp))) or "?"
    groups = {n: Group.of(g or {}) for n, g in (exp.groups or {}).items()}
    finals = sorted({s for g in groups.values() for s in g.seeds or []}, key=str)
    ref = exp.reference
    ref_label = (groups.get(ref) or Group()).label or ref
    better = "lower is better" if exp.lower_is_better is not False else "higher is better"
    cap = exp.cap
    cap_text = f" ({cap:.3g}, the {S.cap_text(exp.metric)})" if S.finite(cap) else ""
    metric = S.metric_text(exp.metric)
    text = (
        f"Each group ran at every {tuned} of the grid ({values}) on tuning seeds {tuning}, then on seeds "
        f"{', '.join(map(str, finals)) or '?'} at its own best value. Score: the {metric} at the end of the "
        f"schedule ({better}); a run that diverged, stalled or ended within the tolerance of the cap{cap_text} "
        f"failed: counted, never scored. Reference: {ref_label}; tolerance {_or(exp.tolerance)}; margin "
        f"{_or(exp.margin)}."
    )
    sizes = exp.sizes
    if isinstance(sizes, list) and sizes:
        each = "; ".join(
            " ".join(f"{k}={setting_text(v)}" for k, v in s.items()) if isinstance(s, dict) else str(s) for s in sizes
        )
        text += f" At {len(sizes)} sizes ({each}): the figure and the table describe the largest."
    return text


def _or(value, missing: str = "?"):
    return missing if value is None else value


def _experiment(
    name: str, exp: Experiment, part: str | None, fig_dir: Path, m: int, claims: list[str]
) -> list[Section]:
    tag = F.slug(name)
    head = "" if part else f"{exp.title or name}: "
    tuned = exp.tuned or "tuned value"
    d = decimals(exp)
    main = Section(f"verdicts-{tag}", f"{head}Each group at its best {tuned}", part=part, paragraphs=[_intro(exp)])
    path = S.plot_sensitivity(exp, fig_dir / f"sensitivity_{tag}.png")
    if path:
        main.figures.append(
            Figure(path, f"{S.metric_text(exp.metric).capitalize()} against {tuned}", SENSITIVITY_CAPTION)
        )
    table = verdict_table(exp, tag, d)
    table.notes.append(numbers_note(exp, d, m))
    main.tables.append(table)
    extra = secondary_table(exp, tag)
    if extra is not None:
        main.tables.append(extra)
    out = [main]
    if isinstance(exp.frontier, dict) and exp.frontier:
        front = Section(f"frontier-{tag}", f"{head}Compute frontier", part=part)
        path = S.plot_frontier(exp, fig_dir / f"frontier_{tag}.png")
        if path:
            front.figures.append(Figure(path, "Score against training FLOPs", FRONTIER_CAPTION))
        front.tables.append(frontier_table(exp, tag))
        out.append(front)
    if claims:
        out.append(Section(f"claims-{tag}", f"{head}Claims", part=part, items=claims))
    return out


def verdict_sections(v: Verdicts, parts: set[str], fig_dir: Path) -> tuple[dict, Section | None]:
    """({part id or None: [sections]}, the final "Claims" section or None). An experiment's sections go with
    the part of that name (`parts`: the report's experiment part ids); None: the sweep has no such part."""
    exps = v.experiments
    m = family_size(v)
    placed: dict = {}
    rest = []
    by_exp: dict[str, list[str]] = {}
    for c in v.claims:
        (by_exp.setdefault(c.experiment, []) if c.experiment in exps else rest).append(claim_text(c))
    for name, exp in exps.items():
        part = name if name in parts else None
        try:
            sections = _experiment(name, exp, part, fig_dir, m, by_exp.get(name, []))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as e:
            sections = [
                Section(
                    f"verdicts-{F.slug(name)}",
                    f"Verdicts: {exp.title or name}",
                    part=part,
                    paragraphs=[
                        f"{FILE}'s entry for {name} could not be drawn ({type(e).__name__}: "
                        f"{e}); its verdicts are in the file."
                    ],
                    items=by_exp.get(name, []),
                )
            ]
        placed.setdefault(part, []).extend(sections)
    final = Section("claims", "Claims", items=rest) if rest else None
    return placed, final
