"""A sweep's verdicts.json as a typed record: one writer (`write_verdicts`) and one reader (`read_verdicts`).

Every field is declared once here, with its meaning; docs/verdicts.md's field tables list the same fields (a test
keeps the two in step). experiments/judge.py fills the record's derived fields from its raw layer; the reports
and `compare` read it. Reading is tolerant: a field an older blocklab did not write reads as None, a field this
blocklab does not know is kept in `extra`, and the file's key order is kept, so that writing back what was read
gives the same bytes. An entry of the wrong shape (a damaged file) is kept as it was read, not converted: its
reader meets the plain value and says it cannot draw it. No torch here: reports read verdicts without it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from blocklab.atomic import write_atomic

FILE = "verdicts.json"


class NotVerdicts(ValueError):
    """The file is JSON but no verdicts: no `experiments` table."""


def _f(meaning: str, nested: Any = None, raw: bool = False) -> Any:
    """A field of a record. `nested`: a record class (an object of it), ("list", C) or ("map", C) (a list or an
    object of C's, C itself a record class or another such pair); None for a plain JSON value. `raw`: the field
    belongs to the raw layer, gathered from the runs (experiments/judge.py derives every other one from it)."""
    return field(default=None, metadata={"meaning": meaning, "nested": nested, "raw": raw})


def _load(value: Any, nested: Any) -> Any:
    if nested is None:
        return value
    if isinstance(nested, tuple):
        kind, inner = nested
        if kind == "list" and isinstance(value, list):
            return [_load(x, inner) for x in value]
        if kind == "map" and isinstance(value, dict):
            return {k: _load(x, inner) for k, x in value.items()}
        return value
    return nested.from_dict(value) if isinstance(value, dict) else value


def _dump(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_dump(x) for x in value]
    if isinstance(value, dict):
        return {k: _dump(x) for k, x in value.items()}
    return value


@dataclass(kw_only=True)
class _Record:
    """The reading and writing every record shares (its fields: the subclass's, each made with _f)."""

    # Fields this blocklab does not know (another version wrote them): kept and written back.
    extra: dict = field(default_factory=dict, repr=False, metadata={"meaning": ""})
    # The keys in the file's order (known and unknown), so that writing back keeps it.
    order: tuple = field(default=(), repr=False, compare=False, metadata={"meaning": ""})

    FIELDS: ClassVar[tuple] = ()  # the record's own fields, in the file's order: set by record()

    @classmethod
    def of(cls, value):
        """`value` as this record: a record as it is, a JSON object read into one (callers may hold either)."""
        return cls.from_dict(value) if isinstance(value, dict) else value

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name: f for f in cls.FIELDS}
        return cls(
            **{k: _load(v, known[k].metadata["nested"]) for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
            order=tuple(data),
        )

    def to_dict(self) -> dict:
        """The JSON object: the keys read, in their order, then any field set since (in declared order, where not
        None), then unknown fields added since."""
        known = {f.name for f in self.FIELDS}
        out = {}
        for k in self.order:
            if k in known:
                out[k] = _dump(getattr(self, k))
            elif k in self.extra:
                out[k] = self.extra[k]
        for f in self.FIELDS:
            if f.name not in out and getattr(self, f.name) is not None:
                out[f.name] = _dump(getattr(self, f.name))
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    def has(self, name: str) -> bool:
        """Whether the file had field `name` (or it was set since): a null one counts."""
        return name in self.order or getattr(self, name, None) is not None


def record(cls):
    """Make `cls` a dataclass record and list its own fields (every field but `extra` and `order`)."""
    cls = dataclass(cls, kw_only=True)
    cls.FIELDS = tuple(f for f in dataclasses.fields(cls) if f.name not in ("extra", "order"))
    return cls


@record
class CurvePoint(_Record):
    value: Any = _f("the tuned setting's value", raw=True)
    seeds: list | None = _f("the tuning seeds run at it", raw=True)
    statuses: list | None = _f(
        "each seed's outcome: completed, diverged, stalled, plateau, missing, interrupted", raw=True
    )
    raw: list | None = _f("each seed's final score whatever its outcome (null where it has none)", raw=True)
    extended: bool | None = _f("a value beyond the grid's edge that compare added", raw=True)
    scores: list | None = _f("each seed's score where it completed (null otherwise)")
    mean: float | None = _f("the mean over its completed seeds")


@record
class Group(_Record):
    label: str | None = _f("the group's name in the report", raw=True)
    settings: dict | None = _f("the dotted settings that set it apart", raw=True)
    facts: dict | None = _f("block, family, kind, norm, warmup, optimizer...: what the claims select by", raw=True)
    curve: list | None = _f("the tuning curve, a point per value", ("list", CurvePoint), raw=True)
    seeds: list | None = _f("the final seeds", raw=True)
    statuses: list | None = _f("each final seed's outcome", raw=True)
    raw: list | None = _f("each final seed's score whatever its outcome (null where it has none)", raw=True)
    n_params: int | None = _f("the model's parameters", raw=True)
    tokens_per_s: float | None = _f("the median training speed of its completed final runs", raw=True)
    measured_alone: bool | None = _f("whether every completed final run trained alone on its machine", raw=True)
    flops: float | None = _f("the training FLOPs of one final run", raw=True)
    eval_se: float | None = _f("the median standard error of a final run's eval loss over the eval batches", raw=True)
    eval_se_paired: float | None = _f(
        "the median paired standard error against the reference over shared batches", raw=True
    )
    measures: dict | None = _f("per-seed measures the claims read (steps_to_reference, first_token_mass...)", raw=True)
    best: Any = _f("the tuned value its final seeds ran at")
    best_at_edge: bool | None = _f("the best is the grid's first or last value")
    stable: list | None = _f("[low, high]: the values within tolerance of the best mean")
    trainable: list | None = _f("[low, high]: the complete values around the best")
    sensitivity: float | None = _f("the mean over the grid of abs(mean - best mean)")
    best_completed: bool | None = _f("the best completed on every tuning seed (else it is a fallback)")
    scores: list | None = _f("each final seed's score where it completed (null otherwise)")
    failed: int | None = _f("final seeds that failed")
    mean: float | None = _f("the mean over completed final seeds")
    sd: float | None = _f("their standard deviation")
    ci95: list | None = _f("the 95% interval of the mean, cut at the failure line")


@record
class Comparison(_Record):
    test: str | None = _f("paired, welch, or null (fewer than two common seeds)")
    seeds: list | None = _f("the seeds both sides completed")
    n: list | None = _f("[n, n]: the seeds each side contributes")
    difference: float | None = _f("the group's score minus the other's")
    se: float | None = _f("the difference's standard error")
    df: float | None = _f("its degrees of freedom")
    correlation: float | None = _f("Pearson's r between the two sides' scores (paired tests)")
    ci95: list | None = _f("the test's own 95% interval")
    p: float | None = _f("the score test's p-value")
    failures: list | None = _f("[k, n, k_ref, n_ref]: failed and decided seeds of each side")
    p_fail: float | None = _f("Boschloo's test of the failure rates, where either side failed")
    group: str | None = _f("a contrast's group (a comparison's is its key)")
    against: str | None = _f("the other side: the reference, or a contrast's second group")
    p_holm: float | None = _f("p after Holm's correction over the family")
    p_fail_holm: float | None = _f("p_fail after Holm's correction over the family")
    family_size: int | None = _f("m, the tests of the family")
    ci_family: list | None = _f("the interval at the level Holm's procedure judged the comparison at")
    mde80: float | None = _f("the difference the test would detect with 80% power at level 0.05/m")
    p_equivalence: float | None = _f("the two one-sided tests against the margin")
    verdict: str | None = _f("the word: fails, fails more often, one seed, at edge, better, worse, equivalent...")


@record
class SecondaryMetric(_Record):
    lower_is_better: bool | None = _f("the metric's direction", raw=True)
    cap: float | None = _f("what a model that learned nothing scores (null: none)", raw=True)
    limit: int | None = _f("harness metrics: the examples per task", raw=True)
    step: int | None = _f("fine-tuning: the pretraining step fine-tuned from", raw=True)
    margin: float | None = _f("the equivalence margin (null: no equivalence test)", raw=True)
    groups: dict | None = _f(
        "{group: its seeds, statuses, raw, scores, failed, mean, sd, ci95}", ("map", Group), raw=True
    )
    comparisons: dict | None = _f("{group: its comparison with the reference}", ("map", Comparison))
    family_size: int | None = _f("the metric's own family's size")


@record
class FrontierPoint(_Record):
    size: int | None = _f("the size's index", raw=True)
    flops: float | None = _f("the training FLOPs of one run", raw=True)
    best: Any = _f("the tuned value it ran at", raw=True)
    seeds: list | None = _f("its final seeds", raw=True)
    statuses: list | None = _f("each seed's outcome", raw=True)
    raw: list | None = _f("each seed's score whatever its outcome", raw=True)
    scores: list | None = _f("each seed's score where it completed")
    mean: float | None = _f("the mean over completed seeds")
    ci95: list | None = _f("its 95% interval")


@record
class Frontier(_Record):
    points: list | None = _f("a point per size", ("list", FrontierPoint), raw=True)
    fit: dict | None = _f("the power law of score against training FLOPs")
    multiplier: float | None = _f("the compute multiplier against the reference's law")
    multiplier_ci95: list | None = _f("its 95% interval")


@record
class Experiment(_Record):
    title: str | None = _f("the experiment's title", raw=True)
    metric: str | None = _f("the primary metric: final_eval_loss", raw=True)
    lower_is_better: bool | None = _f("its direction", raw=True)
    tuned: str | None = _f("the tuned setting (train.lr), null when untuned", raw=True)
    values: list | None = _f("the grid's values", raw=True)
    tuning_seeds: list | None = _f("the tuning seeds", raw=True)
    extend: int | None = _f("values compare may add beyond each edge", raw=True)
    reference: str | None = _f("the group every other is compared with", raw=True)
    tolerance: float | None = _f(
        "how far within the best mean a value is stable; how far past the cap a run must get", raw=True
    )
    margin: float | None = _f("the equivalence margin", raw=True)
    cap: float | None = _f("the unigram model's eval loss: a run that does not get past it failed", raw=True)
    tuning_runs_reused: bool | None = _f("tuning runs reused as final seeds", raw=True)
    seeds_auto: dict | None = _f('with seeds = "auto": the estimate and the seed count', raw=True)
    eval_noise: float | None = _f("the eval set's own noise in a difference", raw=True)
    eval_noise_paired: bool | None = _f("eval_noise is paired over shared eval batches", raw=True)
    sizes: list | None = _f("a sweep with sizes: each size's settings", raw=True)
    factor: dict | None = _f("a factor's level: name, key, level, value, levels", raw=True)
    groups: dict | None = _f("{group: its record}", ("map", Group), raw=True)
    secondary: dict | None = _f("{metric: its record}", ("map", SecondaryMetric), raw=True)
    frontier: dict | None = _f("{group: its compute frontier}, null without sizes", ("map", Frontier), raw=True)
    noise_floor: float | None = _f("the reference's sd over its final seeds")
    pooled_sd: float | None = _f("the within-group sd pooled over groups")
    eval_noise_ratio: float | None = _f("eval_noise / pooled_sd")
    comparisons: dict | None = _f("{group: its comparison with the reference}", ("map", Comparison))
    contrasts: dict | None = _f('{"A vs B": the comparison a claim reads}', ("map", Comparison))
    family_size: int | None = _f("the primary family's size, over the whole sweep")


@record
class Claim(_Record):
    paper: str | None = _f("the paper, as cited")
    claim: str | None = _f("what it claims")
    experiment: str | None = _f("the experiment that judged it")
    group: str | None = _f("the group it is about")
    rule: str | None = _f("the rule, in words")
    rule_id: str | None = _f("the rule's id")
    status: str | None = _f("holds, does not hold, inconclusive")
    why: str | None = _f("the numbers behind the status")


@record
class Interaction(_Record):
    groups: list | None = _f("the group at each of the two levels")
    difference: list | None = _f("[D_A, D_B]: each level's difference against its reference")
    p_holm_levels: list | None = _f("those differences' p_holm")
    seeds: list | None = _f("the seeds both levels completed, both sides")
    interaction: float | None = _f("D_B - D_A, paired by seed")
    se: float | None = _f("its standard error")
    df: float | None = _f("its degrees of freedom")
    ci95: list | None = _f("its 95% interval")
    p: float | None = _f("its p-value")
    factor: str | None = _f("the factor's setting")
    levels: list | None = _f("[A, B]: the two levels")
    p_holm: float | None = _f("p after Holm's correction over the sweep's interactions")
    family_size: int | None = _f("the interactions' family size")
    ci_family: list | None = _f("the interval at the level Holm's procedure judged it at")
    verdict: str | None = _f("flips, same order, unresolved")


@record
class VerdictsFile(_Record):
    sweep: str | None = _f("the sweep's name", raw=True)
    experiments: dict | None = _f("{experiment: its record}", ("map", Experiment), raw=True)
    format: int | None = _f("the file's layout (2: failures apart, paired tests, families); older files have none")
    claims: list | None = _f("the papers' claims, judged", ("list", Claim))
    interactions: dict | None = _f(
        "{crossed experiment: {group: its interaction}}, with factors", ("map", ("map", Interaction))
    )

    @property
    def experiment_records(self) -> dict[str, Experiment]:
        """The experiments that are records (an entry of another shape in a damaged file left out)."""
        table = self.experiments if isinstance(self.experiments, dict) else {}
        return {k: v for k, v in table.items() if isinstance(v, Experiment)}

    @property
    def claim_records(self) -> list[Claim]:
        """The claims that are records (an entry of another shape left out)."""
        return [c for c in self.claims if isinstance(c, Claim)] if isinstance(self.claims, list) else []


RECORDS = (VerdictsFile, Experiment, Group, CurvePoint, Comparison, SecondaryMetric, Frontier, FrontierPoint)
RECORDS += (Claim, Interaction)


def raw_fields(record_class) -> list[str]:
    """The raw layer's fields of a record class, in the file's order: what a rejudge reads back."""
    return [f.name for f in record_class.FIELDS if f.metadata["raw"]]


def verdicts_path(out: str | Path) -> Path:
    return Path(out) / FILE


def verdicts_of(data: dict) -> VerdictsFile:
    """The record of verdicts.json's content; NotVerdicts where it has no `experiments` table."""
    if not isinstance(data, dict) or not isinstance(data.get("experiments"), dict):
        raise NotVerdicts(f"{FILE} holds no `experiments` table")
    return VerdictsFile.from_dict(data)


def read_verdicts(out: str | Path) -> VerdictsFile:
    """DIR/verdicts.json. Raises OSError where it cannot be read (FileNotFoundError: there is none), ValueError
    where it is not JSON, NotVerdicts where it is JSON but no verdicts."""
    return verdicts_of(json.loads(verdicts_path(out).read_text()))


def verdicts_text(verdicts: VerdictsFile) -> str:
    """The file's text: what write_verdicts writes."""
    return json.dumps(verdicts.to_dict(), indent=2) + "\n"


def write_verdicts(out: str | Path, verdicts: VerdictsFile) -> Path:
    """Write DIR/verdicts.json atomically (a reader sees the old file or the new one)."""
    return write_atomic(verdicts_path(out), verdicts_text(verdicts))
