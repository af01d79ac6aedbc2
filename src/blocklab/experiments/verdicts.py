"""verdicts.json (SPEC 10): each group's curve over the tuned grid, its best value and ranges, its final seeds'
mean and interval, and every comparison against the experiment's reference with Holm's correction.

Computed once, here, from the runs' summary.json files; the report only draws and words it. The statistics
are plain functions in blocklab.stats.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from blocklab import stats
from blocklab.experiments.answers_claims import answers_claims
from blocklab.experiments.claims import claims
from blocklab.experiments.secondary import secondary_metrics
from blocklab.experiments.stream_claims import stream_claims
from blocklab.experiments.sweep import GroupSpec, RunSpec, Sweep
from blocklab.experiments.tuning import DEFAULT_TOLERANCE

METRIC = "final_eval_loss"
COMPLETED = "completed"


def read_summary(out: Path, name: str) -> dict | None:
    try:
        return json.loads((out / "runs" / name / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def cap_of(summaries: list[dict | None]) -> float | None:
    """The score a failed run gets: the unigram model's eval loss (a model that learned only the training
    split's token frequencies, scored on the validation split), which a language-model run's summary records;
    the training split's unigram entropy for runs written before it was."""
    values = [s["unigram_eval_loss"] for s in summaries if s and _finite(s.get("unigram_eval_loss"))]
    values = values or [s["unigram_entropy"] for s in summaries if s and _finite(s.get("unigram_entropy"))]
    return statistics.median(values) if values else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def run_score(summary: dict | None, cap: float | None, tolerance: float) -> tuple[float | None, bool, bool]:
    """(score, capped, ok): a diverged, stalled or unfinished run, or one ending worse than the cap, scores the
    cap; `ok` is what the trainable range asks: completed and at least `tolerance` better than the cap."""
    value = (summary or {}).get(METRIC)
    completed = (summary or {}).get("status") == COMPLETED and _finite(value)
    if cap is None:
        return (value if completed else None), not completed, completed
    if not completed or value > cap:
        return cap, True, False
    return value, False, value <= cap - tolerance


def _curve(sweep: Sweep, out: Path, g: GroupSpec, size, cap, tolerance) -> list[dict]:
    tune = sweep.tune_of(g)
    points = []
    for value in tune.values:
        runs = [sweep.make_run(g, size, value, seed, "tune") for seed in tune.seeds]
        summaries = [read_summary(out, r.name) for r in runs]
        scored = [run_score(s, cap, tolerance) for s in summaries]
        scores = [s for s, _, _ in scored]
        points.append(
            {
                "value": value,
                "seeds": list(tune.seeds),
                "scores": scores,
                "statuses": [(s or {}).get("status", "missing") for s in summaries],
                "capped": [c for _, c, _ in scored],
                "ok": [k for _, _, k in scored],
                "mean": statistics.fmean(scores) if None not in scores else None,
            }
        )
    return points


def choose_best(sweep: Sweep, out: Path) -> dict:
    """{(group, size): best value} for every tuned group whose tuning runs have all finished."""
    best = {}
    for exp in _experiments(sweep):
        groups = [g for g in sweep.groups if g.experiment == exp]
        tune = sweep.tune_of(groups[0])
        if tune is None:
            continue
        for size in sweep.size_indices():
            cap = cap_of([read_summary(out, r.name) for r in sweep.tuning_runs if r.experiment == exp])
            for g in groups:
                points = _curve(sweep, out, g, size, cap, tune.tolerance)
                if any(s is None for p in points for s in p["scores"]):
                    continue
                best[(g.name, size)] = stats.analyse_curve(points, tune.tolerance, cap)["best"]
    return best


def _experiments(sweep: Sweep) -> list[str | None]:
    return list(sweep.experiments) if sweep.experiments else [None]


def _finals(g: GroupSpec, size, finals: list[RunSpec]) -> list[RunSpec]:
    key = g.name if size is None else f"{g.name}_z{size}"
    return [r for r in finals if r.group == key]


def _group_entry(sweep, out, g, size, finals, cap, tolerance) -> dict:
    tune = sweep.tune_of(g)
    entry: dict = {"label": g.label, "settings": g.settings}
    if tune is not None:
        points = _curve(sweep, out, g, size, cap, tolerance)
        entry["curve"] = [{k: p[k] for k in ("value", "seeds", "scores", "statuses", "capped", "mean")} for p in points]
        keys = ("best", "best_at_edge", "stable", "trainable", "sensitivity")
        if any(s is None for p in points for s in p["scores"]):  # tuning not finished: no best yet
            entry.update(dict.fromkeys(keys))
        else:
            analysis = stats.analyse_curve(points, tolerance, cap)
            entry.update({k: analysis[k] for k in keys})
            for p, m in zip(entry["curve"], analysis["means"]):
                p["mean"] = m
    else:
        entry.update(curve=[], best=None, best_at_edge=None, stable=None, trainable=None, sensitivity=None)
    runs = _finals(g, size, finals)
    summaries = [read_summary(out, r.name) for r in runs]
    scored = [(r.seed, run_score(s, cap, tolerance)[0], s) for r, s in zip(runs, summaries)]
    scored = [(seed, score, s) for seed, score, s in scored if score is not None]
    scores = [score for _, score, _ in scored]
    mean, sd = stats.mean_sd(scores) if scores else (None, None)
    done = [s for _, _, s in scored if s]
    entry.update(
        seeds=[seed for seed, _, _ in scored],
        scores=scores,
        statuses=[(s or {}).get("status", "missing") for _, _, s in scored],
        mean=mean,
        sd=sd,
        ci95=stats.t_interval(scores) if len(scores) > 1 else None,
        n_params=done[0].get("n_params") if done else None,
        tokens_per_s=statistics.median([s["tokens_per_s"] for s in done if _finite(s.get("tokens_per_s"))])
        if any(_finite(s.get("tokens_per_s")) for s in done)
        else None,
        measured_alone=all(s.get("concurrent_runs", 1) == 1 for s in done) if done else None,
        flops=_flops(done),
        eval_se=_median([s.get("final_eval_se") for s in done]),
    )
    return entry


def _flops(summaries: list[dict]) -> float | None:
    """Training FLOPs of one run: the model's count per token times the tokens it trained on."""
    values = [
        s["flops_per_token"] * s["tokens"]
        for s in summaries
        if _finite(s.get("flops_per_token")) and _finite(s.get("tokens"))
    ]
    return max(values) if values else None


def _median(values) -> float | None:
    values = [v for v in values if _finite(v)]
    return statistics.median(values) if values else None


def _paired_eval_noise(out: Path, finals_by_group: dict, reference: str) -> dict:
    """{group: the median over seeds of the standard error of (group's eval loss - reference's) over their shared
    eval batches}: the eval set's own noise in a comparison. Every run of a sweep sees the same eval batches, so
    the spread between batches (files of different difficulty) is common to both sides and cancels; the
    unpaired per-run standard error overstates it. Groups whose runs predate per-batch losses are left out."""

    def batches(run: RunSpec):
        b = (read_summary(out, run.name) or {}).get("final_eval_batches")
        return (b["loss"], b["tokens"]) if isinstance(b, dict) and b.get("loss") else None

    refs = {r.seed: batches(r) for r in finals_by_group.get(reference, [])}
    noise = {}
    for name, runs in finals_by_group.items():
        if name == reference:
            continue
        ses = []
        for r in runs:
            mine, theirs = batches(r), refs.get(r.seed)
            if mine and theirs and mine[1] == theirs[1]:  # the same batches, token for token
                ses.append(stats.paired_se(mine[0], theirs[0], mine[1]))
        value = _median(ses)
        if value is not None:
            noise[name] = value
    return noise


def _reference(sweep: Sweep, exp, groups: list[GroupSpec]) -> str:
    target = (sweep.experiments or {}).get(exp, {}).get("target_run") if exp else sweep.target_run
    return target or groups[0].name


def _experiment(sweep: Sweep, out: Path, exp, finals) -> dict:
    groups = [g for g in sweep.groups if g.experiment == exp]
    tune = sweep.tune_of(groups[0])
    tolerance = tune.tolerance if tune else DEFAULT_TOLERANCE
    cap = cap_of([read_summary(out, r.name) for r in sweep.runs + finals if r.experiment == exp])
    sizes = sweep.size_indices()
    largest = sizes[-1]
    entries = {g.name: _group_entry(sweep, out, g, largest, finals, cap, tolerance) for g in groups}
    reference = _reference(sweep, exp, groups)
    meta = (sweep.experiments or {}).get(exp, {}) if exp else {}
    result = {
        "title": meta.get("title") or sweep.name,
        "metric": METRIC,
        "lower_is_better": True,
        "tuned": tune.key if tune else None,
        "values": list(tune.values) if tune else None,
        "tuning_seeds": list(tune.seeds) if tune else None,
        "reference": reference,
        "tolerance": tolerance,
        "cap": cap,
        "tuning_runs_reused": bool(tune and tune.reuse),
        "noise_floor": entries[reference]["sd"],
        "min_detectable": None,
        "eval_noise": _median([e["eval_se"] for e in entries.values()]),
        "sizes": sweep.sizes or None,
        "groups": entries,
        "comparisons": {},
        "frontier": None,
    }
    finals_by_group = {g.name: _finals(g, largest, finals) for g in groups}
    result["secondary"] = secondary_metrics(sweep, out, finals_by_group, lambda r: read_summary(out, r.name))
    paired = _paired_eval_noise(out, finals_by_group, reference)
    for name, se in paired.items():
        entries[name]["eval_se_paired"] = se
    if paired:
        result["eval_noise"] = _median(list(paired.values()))
    result["eval_noise_paired"] = bool(paired)
    if len(sizes) > 1:
        result["frontier"] = _frontier(sweep, out, groups, finals, cap, tolerance, reference)
    return result


def _compare(groups: dict, reference: str, lower_is_better: bool, family: list) -> dict:
    """Each group's Welch comparison against the reference; those with two or more seeds on both sides join
    `family` (the sweep's Holm family)."""
    ref = groups[reference]
    out = {}
    for name, g in groups.items():
        if name == reference:
            continue
        c = {
            "against": reference,
            "difference": None,
            "ci95": None,
            "p": None,
            "p_holm": None,
            "verdict": "one seed",
            "n": [len(g["scores"]), len(ref["scores"])],
        }
        if g["mean"] is not None and ref["mean"] is not None:
            c["difference"] = g["mean"] - ref["mean"]
        if len(g["scores"]) > 1 and len(ref["scores"]) > 1:
            c.update(stats.welch(g["scores"], ref["scores"]))
            family.append((c, lower_is_better))
        out[name] = c
    return out


def _comparisons(experiments: dict) -> None:
    """Welch against each experiment's reference, on the primary metric and every secondary one, then Holm
    over every comparison of the sweep with two or more seeds on both sides; `min_detectable` (primary
    metric) at the Bonferroni level of that family's size."""
    family: list = []
    for result in experiments.values():
        result["comparisons"] = _compare(result["groups"], result["reference"], True, family)
        for metric in (result.get("secondary") or {}).values():
            metric["comparisons"] = _compare(metric["groups"], result["reference"], metric["lower_is_better"], family)
    for (c, lower), p in zip(family, stats.holm([c["p"] for c, _ in family])):
        c["p_holm"] = p
        c["verdict"] = stats.verdict(c["difference"], p, *c["n"], lower_is_better=lower)
    for result in experiments.values():
        ref = result["groups"][result["reference"]]
        result["min_detectable"] = stats.min_detectable(ref["sd"], len(ref["scores"]), max(1, len(family)))


def _frontier(sweep, out, groups, finals, cap, tolerance, reference) -> dict:
    points = {}
    for g in groups:
        rows = []
        for size in sweep.size_indices():
            e = _group_entry(sweep, out, g, size, finals, cap, tolerance)
            rows.append(
                {
                    "size": size,
                    "flops": e["flops"],
                    "best": e["best"],
                    "seeds": e["seeds"],
                    "scores": e["scores"],
                    "mean": e["mean"],
                    "ci95": e["ci95"],
                }
            )
        points[g.name] = rows
    frontier = {}
    for name, rows in points.items():
        usable = [r for r in rows if r["flops"] and r["scores"]]
        entry = {"points": rows, "fit": None, "multiplier": None, "multiplier_ci95": None}
        ref_usable = [r for r in points[reference] if r["flops"] and r["scores"]]
        try:
            entry["fit"] = stats.fit_power_law([r["flops"] for r in usable], [r["mean"] for r in usable])
            if name != reference and len(ref_usable) > 1:
                m = stats.compute_multiplier(
                    [{"flops": r["flops"], "scores": r["scores"]} for r in ref_usable],
                    [{"flops": r["flops"], "scores": r["scores"]} for r in usable],
                )
                entry["multiplier"], entry["multiplier_ci95"] = m["multiplier"], m["multiplier_ci95"]
            elif name == reference:
                entry["multiplier"], entry["multiplier_ci95"] = 1.0, [1.0, 1.0]
        except ValueError:
            pass  # fewer than two sizes with a finished run: no fit yet
        frontier[name] = entry
    return frontier


def compute_verdicts(sweep: Sweep, out: str | Path, finals: list[RunSpec]) -> dict:
    out = Path(out)
    experiments = {str(exp) if exp else sweep.name: _experiment(sweep, out, exp, finals) for exp in _experiments(sweep)}
    _comparisons(experiments)
    found = claims(experiments, sweep) + stream_claims(experiments, sweep, out, finals)
    found += answers_claims(experiments, sweep, out, finals)
    return {"sweep": sweep.name, "experiments": experiments, "claims": found}
