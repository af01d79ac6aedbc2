"""DIR/verdicts.json (docs/verdicts.md): the raw per-seed outcomes of a sweep's runs, gathered here from their
folders, and everything derived from them (experiments/judge.py). Also what the sweep must run next that only
the stored runs can say: each group's best value, the values beyond a grid edge, the count of final seeds."""

from __future__ import annotations

import statistics
from pathlib import Path

from blocklab import stats
from blocklab.experiments import records as R
from blocklab.experiments.claims.stream import SPEEDUPS
from blocklab.experiments.judge import classify, judge, raw_layer, tuning_analysis
from blocklab.experiments.protocol import auto_count
from blocklab.experiments.secondary import secondary_metrics
from blocklab.experiments.sweep import GroupSpec, RunSpec, Sweep, group_key
from blocklab.experiments.tuning import DEFAULT_TOLERANCE
from blocklab.run_summary import RunSummary

read_summary = R.read_summary
cap_of = R.cap_of
METRIC = R.METRIC


def _exp_name(sweep: Sweep, exp) -> str:
    return str(exp) if exp else sweep.name


def _experiments(sweep: Sweep) -> list[str | None]:
    return list(sweep.experiments) if sweep.experiments else [None]


def _cap(sweep: Sweep, out: Path, exp) -> float | None:
    return R.cap_of([R.read_summary(out, r.name) for r in sweep.runs if r.experiment == exp])


def raw_curve(sweep: Sweep, out: Path, g: GroupSpec, size) -> list[dict]:
    """The group's tuning curve as stored: per value its seeds, training statuses and raw final scores."""
    tune = sweep.tune_of(g)
    points = []
    for value in sweep.tuning_values(g, size):
        runs = [sweep.make_run(g, size, value, seed, "tune") for seed in tune.seeds]
        points.append({"value": value, **R.seeds_record(out, runs), "extended": value not in tune.values})
    return points


def _analyses(sweep: Sweep, out: Path):
    """(group, size, tune, analysis or None while its tuning runs are unfinished) for every tuned group."""
    for exp in _experiments(sweep):
        groups = [g for g in sweep.groups if g.experiment == exp]
        tune = sweep.tune_of(groups[0])
        if tune is None:
            continue
        cap = _cap(sweep, out, exp)
        for size in sweep.size_indices():
            for g in groups:
                points = raw_curve(sweep, out, g, size)
                yield g, size, tune, tuning_analysis(points, cap, tune.tolerance, True)


def choose_best(sweep: Sweep, out: Path) -> dict:
    """{(group, size): the value its final seeds run at} for every tuned group whose tuning runs have finished."""
    return {(g.name, size): a["best"] for g, size, _, a in _analyses(sweep, Path(out)) if a is not None}


def extension_runs(sweep: Sweep, out: Path) -> list[RunSpec]:
    """The tuning runs a best at a grid edge asks for: the next value beyond that edge (stats.next_value) on every
    tuning seed, while the group has added fewer than `extend` values on that side. Deterministic in the stored
    runs, so a resumed sweep finds the same ones."""
    new = []
    for g, size, tune, a in _analyses(sweep, Path(out)):
        if a is None or not a.get("best_at_edge") or not a.get("best_completed") or not tune.numeric:
            continue
        values = sweep.tuning_values(g, size)
        side = "low" if a["best"] == values[0] else "high"
        beyond = [v for v in values if (v < tune.values[0] if side == "low" else v > tune.values[-1])]
        if len(beyond) >= tune.extend:
            continue
        value = stats.next_value(values, side)
        if value is not None:
            new += [sweep.make_run(g, size, value, seed, "tune") for seed in tune.seeds]
    return new


def seed_counts(sweep: Sweep, out: Path, finals: list[RunSpec]) -> dict:
    """With seeds = "auto": {experiment: its seeds_auto record} from the first round of final seeds."""
    if not sweep.auto:
        return {}
    first = set(sweep.final_seeds()[: sweep.power.min_seeds])
    m = sum(1 for g in sweep.groups if sweep.tune_of(g)) - len(_experiments(sweep))  # each group but the reference
    found = {}
    for exp in _experiments(sweep):
        groups = [g for g in sweep.groups if g.experiment == exp]
        cap, tol = _cap(sweep, out, exp), sweep.tune_of(groups[0]).tolerance
        samples = []
        for g in groups:
            runs = [r for r in _finals(g, sweep.size_indices()[-1], finals) if r.seed in first]
            rec = R.seeds_record(out, runs)
            done = [x for s, x in zip(rec["statuses"], rec["raw"]) if classify(s, x, cap, tol, True) == "completed"]
            samples.append(done)
        found[exp] = auto_count(samples, sweep.power, max(1, m))
    return found


def _finals(g: GroupSpec, size, finals: list[RunSpec]) -> list[RunSpec]:
    return [r for r in finals if r.group == group_key(g.name, size)]


def _group_raw(sweep: Sweep, out: Path, g: GroupSpec, size, finals: list[RunSpec]) -> dict:
    runs = _finals(g, size, finals)
    summaries = [R.read_summary(out, r.name) for r in runs]
    done = [s for s in summaries if s and s.status == "completed"]
    speeds = [s.tokens_per_s for s in done if R.finite(s.tokens_per_s)]
    tune = sweep.tune_of(g)
    config = sweep.make_run(g, size, tune.values[0] if tune else None, sweep.final_seeds()[0], "final").config
    facts = R.group_facts(config)
    for info in sweep.factors.values():
        if g.name in info["groups"]:
            facts["factor_group"] = info["groups"][g.name]
    return {
        "label": g.label,
        "settings": g.settings,
        "facts": facts,
        "curve": raw_curve(sweep, out, g, size) if tune is not None else [],
        **R.seeds_record(out, runs),
        "n_params": next((s.n_params for s in summaries if s and s.n_params), None),
        "tokens_per_s": statistics.median(speeds) if speeds else None,
        "measured_alone": all((s.concurrent_runs or 1) == 1 for s in done) if done else None,
        "flops": _flops(done),
        "eval_se": _median([s.final_eval_se for s in done]),
        "measures": R.probe_measures(out, runs),
    }


def _flops(summaries: list[RunSummary]) -> float | None:
    """Training FLOPs of one run: the model's count per token times the tokens it trained on."""
    values = [s.flops_per_token * s.tokens for s in summaries if R.finite(s.flops_per_token) and R.finite(s.tokens)]
    return max(values) if values else None


def _median(values) -> float | None:
    values = [v for v in values if R.finite(v)]
    return statistics.median(values) if values else None


def _paired_eval_noise(out: Path, finals_by_group: dict, reference: str) -> dict:
    """{group: the median over seeds of the standard error of (group's eval loss - reference's) over their shared
    eval batches}: the eval set's own noise in a comparison. Every run of a sweep sees the same eval batches, so
    the spread between batches (files of different difficulty) is common to both sides and cancels."""

    def batches(run: RunSpec):
        b = getattr(R.read_summary(out, run.name), "final_eval_batches", None)
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


def _experiment(sweep: Sweep, out: Path, exp, finals, counts: dict) -> dict:
    groups = [g for g in sweep.groups if g.experiment == exp]
    tune = sweep.tune_of(groups[0])
    largest = sweep.size_indices()[-1]
    reference = _reference(sweep, exp, groups)
    entries = {g.name: _group_raw(sweep, out, g, largest, finals) for g in groups}
    finals_by_group = {g.name: _finals(g, largest, finals) for g in groups}
    if any(e["facts"]["block"] in SPEEDUPS for e in entries.values()):  # the speed-up claims' measure
        completed = {
            n: {s for s, st in zip(e["seeds"], e["statuses"]) if st == "completed"} for n, e in entries.items()
        }
        for name, found in R.steps_to_reference(out, finals_by_group, reference, completed).items():
            entries[name]["measures"]["steps_to_reference"] = found
    paired = _paired_eval_noise(out, finals_by_group, reference)
    for name, se in paired.items():
        entries[name]["eval_se_paired"] = se
    meta = (sweep.experiments or {}).get(exp, {}) if exp else {}
    result = {
        "title": meta.get("title") or sweep.name,
        "metric": METRIC,
        "lower_is_better": True,
        "tuned": tune.key if tune else None,
        "values": list(tune.values) if tune else None,
        "tuning_seeds": list(tune.seeds) if tune else None,
        "extend": tune.extend if tune else None,
        "reference": reference,
        "tolerance": tune.tolerance if tune else DEFAULT_TOLERANCE,
        "margin": sweep.compare_of(exp).margin,
        "cap": _cap(sweep, out, exp) if tune else R.cap_of([R.read_summary(out, r.name) for r in finals]),
        "tuning_runs_reused": bool(tune and tune.reuse),
        "seeds_auto": counts.get(exp),
        "eval_noise": _median(list(paired.values())) if paired else _median([e["eval_se"] for e in entries.values()]),
        "eval_noise_paired": bool(paired),
        "sizes": sweep.sizes or None,
        "groups": entries,
        "secondary": secondary_metrics(sweep, out, finals_by_group, lambda r: R.read_summary(out, r.name)),
        "frontier": _frontier(sweep, out, groups, finals) if len(sweep.size_indices()) > 1 else None,
    }
    for base, info in sweep.factors.items():
        for level, value in zip(info["experiments"], info["levels"]):
            if info["experiments"][level] == exp:
                result["factor"] = {
                    "name": base,
                    "key": info["key"],
                    "level": level,
                    "value": value,
                    "levels": info["levels"],
                }
    return result


def _frontier(sweep: Sweep, out: Path, groups: list[GroupSpec], finals) -> dict:
    frontier = {}
    for g in groups:
        points = []
        for size in sweep.size_indices():
            runs = _finals(g, size, finals)
            done = [s for s in (R.read_summary(out, r.name) for r in runs) if s and s.status == "completed"]
            best = runs[0].value if runs else None
            points.append({"size": size, "flops": _flops(done), "best": best, **R.seeds_record(out, runs)})
        frontier[g.name] = {"points": points}
    return frontier


def compute_verdicts(sweep: Sweep, out: str | Path, finals: list[RunSpec], counts: dict | None = None) -> dict:
    """verdicts.json's content: the raw layer from the run folders, then everything judge derives from it."""
    out = Path(out)
    experiments = {
        _exp_name(sweep, exp): _experiment(sweep, out, exp, finals, counts or {}) for exp in _experiments(sweep)
    }
    # through the raw layer, as a rejudge reads the file back: the same fields in the same order either way
    return judge(raw_layer({"sweep": sweep.name, "experiments": experiments}))
