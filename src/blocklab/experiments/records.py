"""The raw layer of verdicts.json, read from a sweep's run folders (docs/verdicts.md): per run its training status
and final score, per group its facts (block, family, warm-up) and per-seed measures (the claims' steps to
Pre-LN's loss, composite gains, first-token attention mass). experiments/judge.py derives the rest."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from blocklab import run_summary
from blocklab.registry import REGISTRY
from blocklab.run_summary import RunSummary
from blocklab.training.rundir import STREAM_PROBES

METRIC = "final_eval_loss"
WINDOW = 5  # logged training losses in each trailing mean (5 x log_every steps)


def read_summary(out: Path, name: str) -> RunSummary | None:
    """The summary of run `name` of the sweep in `out` (None: not trained, or still training)."""
    return run_summary.read_summary(Path(out) / "runs" / name)


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def cap_of(summaries: list[RunSummary | None]) -> float | None:
    """The score of a model that learned only token frequencies: the unigram model's eval loss (the training
    split's unigram entropy for runs written before the eval loss was recorded)."""
    values = [s.unigram_eval_loss for s in summaries if s and finite(s.unigram_eval_loss)]
    values = values or [s.unigram_entropy for s in summaries if s and finite(s.unigram_entropy)]
    return statistics.median(values) if values else None


def status_of(summary: RunSummary | None) -> str:
    """A run's training status as its summary says it (`missing` without one)."""
    return summary.status if summary is not None else "missing"


def raw_of(summary: RunSummary | None, metric: str = METRIC):
    value = getattr(summary, metric, None)
    return float(value) if finite(value) else None


def seeds_record(out: Path, runs: list) -> dict:
    """{"seeds", "statuses", "raw"} of `runs` (RunSpecs), aligned."""
    summaries = [read_summary(out, r.name) for r in runs]
    return {
        "seeds": [r.seed for r in runs],
        "statuses": [status_of(s) for s in summaries],
        "raw": [raw_of(s) for s in summaries],
    }


def answer_kind(model) -> str:
    """What a group is, as the claims name it: 'gate' or the pointwise norm on Pre-LN, else the block's name."""
    if model.block == "pre-ln" and model.attn_gate is not False:
        return "gate"
    if model.block == "pre-ln" and model.norm in ("derf", "dyt"):
        return model.norm
    return model.block


def group_facts(config) -> dict:
    """The facts about a group that the claims select by, from its resolved run config."""
    spec = REGISTRY.get(config.model.block)
    return {
        "block": config.model.block,
        "family": spec.family if spec is not None else None,
        "kind": answer_kind(config.model),
        "norm": config.model.norm,
        "warmup": config.train.warmup_steps > 0,
        "warmup_steps": config.train.warmup_steps,
        "optimizer": config.train.optimizer,
        "task": config.model.task,
        "canon": config.model.canon,
    }


def training_curve(run: Path) -> list[tuple[int, float]]:
    """(step, trailing mean of WINDOW logged training losses) from RUN/metrics.jsonl; [] where unreadable."""
    rows = []
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
            rows.append((int(row["step"]), float(row["loss"])))
        except (ValueError, KeyError, TypeError):
            continue
    rows.sort()
    out = []
    for i, (step, _) in enumerate(rows):
        window = [v for _, v in rows[max(0, i - WINDOW + 1) : i + 1]]
        out.append((step, sum(window) / len(window)))
    return out


def steps_to(curve: list[tuple[int, float]], level: float) -> int:
    """The first step whose trailing loss is at or below `level`; the last step where none is (a bound)."""
    return next((s for s, v in curve if v <= level), curve[-1][0])


def steps_to_reference(out: Path, runs_by_group: dict, reference: str, completed: dict) -> dict:
    """{group: {"level", "seeds", "values"}}: on each completed final seed, the steps to the reference's final
    training loss (the mean over its completed seeds of each one's trailing mean at its last step)."""
    curves = {
        n: {r.seed: training_curve(Path(out) / "runs" / r.name) for r in runs} for n, runs in runs_by_group.items()
    }
    ref = [c[-1][1] for s, c in curves.get(reference, {}).items() if c and s in completed.get(reference, set())]
    if not ref:
        return {}
    level = sum(ref) / len(ref)
    found = {}
    for name, by_seed in curves.items():
        seeds = [s for s, c in by_seed.items() if c and s in completed.get(name, set())]
        found[name] = {"level": level, "seeds": seeds, "values": [steps_to(by_seed[s], level) for s in seeds]}
    return found


def _probes(run: Path) -> dict | None:
    try:
        return json.loads((run / STREAM_PROBES).read_text())["final"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def largest_gain(final: dict) -> float | None:
    """A run's largest composite gain over depth after training (forward or backward)."""
    try:
        gain = final["mixing"]["gain"]
        return float(max(max(gain["composite_forward"]), max(gain["composite_backward"])))
    except (KeyError, TypeError, ValueError):
        return None


def first_token_mass(final: dict) -> tuple[float, float] | None:
    """(first-token attention mass after training, the mean over layers and heads; the evenly spread level)."""
    try:
        att = final["attention"]
        values = [v for heads in att["first_token_mass"] for v in heads]
        return sum(values) / len(values), float(att["uniform"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def probe_measures(out: Path, runs: list) -> dict:
    """{"largest_gain": {...}, "first_token_mass": {...}} of a group's final runs, where their probes hold them."""
    gains, masses, uniform = [], [], None
    for r in runs:
        final = _probes(Path(out) / "runs" / r.name)
        if final is None:
            continue
        if (g := largest_gain(final)) is not None:
            gains.append((r.seed, g))
        if (m := first_token_mass(final)) is not None:
            masses.append((r.seed, m[0]))
            uniform = m[1]
    found = {}
    if gains:
        found["largest_gain"] = {"seeds": [s for s, _ in gains], "values": [v for _, v in gains]}
    if masses:
        found["first_token_mass"] = {
            "seeds": [s for s, _ in masses],
            "values": [v for _, v in masses],
            "uniform": uniform,
        }
    return found
