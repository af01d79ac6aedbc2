"""Verdicts from per-seed records (docs/verdicts.md): everything verdicts.json says beyond the raw outcomes of its
runs is computed here, from those outcomes alone, so `blocklab report DIR --rejudge` recomputes it without the
runs and two computations can never disagree.

The raw layer each experiment holds: per group its tuning curve and final seeds as aligned `seeds`,
`statuses` (the training status) and `raw` (the run's final score whatever its fate), plus its facts and
measures; per secondary metric the same per group. `judge` derives, in place: each run's outcome (completed,
with a score, or failed), the curves' best values and ranges, each group's mean and interval over its
completed seeds, each comparison's tests, the families and their corrections, the verdict words, the claims.
"""

from __future__ import annotations

import copy
import math

from blocklab import stats
from blocklab.experiments.claims import claim_pairs, judge_claims
from blocklab.experiments.factors import judge_interactions
from blocklab.experiments.frontier import judge_frontier
from blocklab.verdicts_record import CurvePoint, Experiment, FrontierPoint, Group, SecondaryMetric, raw_fields

FAILED = ("diverged", "stalled", "plateau")  # a run that ended on (or near) the unigram plateau: "plateau"
TRAINED = ("completed", "plateau")  # trained to the end of its schedule; its raw score says which
FORMAT = 2  # verdicts.json's layout: failures apart, tests paired by seed, families, claims with their rules

# The raw layer, as verdicts_record declares it: judge reads these fields and derives every other one.
RAW_EXPERIMENT = raw_fields(Experiment)
RAW_GROUP = raw_fields(Group)
RAW_POINT = raw_fields(CurvePoint)
RAW_METRIC = raw_fields(SecondaryMetric)
RAW_SEEDS = "seeds statuses raw".split()  # a secondary metric's group: its outcomes alone
RAW_FRONTIER_POINT = raw_fields(FrontierPoint)


def pick(d: dict, keys: list[str]) -> dict:
    return {k: copy.deepcopy(d[k]) for k in keys if k in d}


def raw_layer(verdicts: dict) -> dict:
    """The raw layer of a current verdicts.json: what judge reads, nothing it derives."""
    experiments = {}
    for name, exp in verdicts["experiments"].items():
        e = pick(exp, RAW_EXPERIMENT)
        e["groups"] = {}
        for g_name, g in exp["groups"].items():
            entry = pick(g, RAW_GROUP)
            entry["curve"] = [pick(p, RAW_POINT) for p in g.get("curve") or []]
            e["groups"][g_name] = entry
        e["secondary"] = {
            k: dict(pick(m, RAW_METRIC), groups={n: pick(x, RAW_SEEDS) for n, x in m["groups"].items()})
            for k, m in (exp.get("secondary") or {}).items()
        }
        if exp.get("frontier"):
            e["frontier"] = {
                n: {"points": [pick(p, RAW_FRONTIER_POINT) for p in f.get("points") or []]}
                for n, f in exp["frontier"].items()
            }
        experiments[name] = e
    return {"sweep": verdicts.get("sweep"), "experiments": experiments}


def classify(status: str | None, raw, cap, tolerance: float, lower_is_better: bool) -> str:
    """A run's outcome from its training status and final score: `completed` (it has a score), one of FAILED,
    or its status as it is (`missing`, `interrupted`: undecided, neither counted nor scored)."""
    if status not in TRAINED:
        return status or "missing"
    if not _finite(raw):  # a failure with no score to read (no fine-tune completed) stays one
        return "plateau" if status == "plateau" else "missing"
    if cap is None:
        return "completed"
    # How far the run got past the cap in the metric's direction: it must get past it, by at least `tolerance`
    # (a hair of slack so that a score exactly `tolerance` from the cap in decimal is not lost to rounding).
    beyond = cap - raw if lower_is_better else raw - cap
    return "completed" if beyond > 0 and beyond >= tolerance - 1e-9 * max(1.0, abs(cap)) else "plateau"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _outcomes(item: dict, cap, tolerance: float, lower: bool) -> None:
    """item's `statuses` reclassified and its `scores` (None where not completed), from `raw`."""
    item["statuses"] = [classify(s, r, cap, tolerance, lower) for s, r in zip(item["statuses"], item["raw"])]
    item["scores"] = [r if s == "completed" else None for s, r in zip(item["statuses"], item["raw"])]


def tuning_analysis(points: list[dict], cap, tolerance: float, lower: bool) -> dict | None:
    """A curve's points classified in place (each point's `statuses`, `scores` and `mean`), then its best value,
    ranges and sensitivity (stats.analyse_curve); None while a tuning run is undecided (not finished). Where no
    value completed on every tuning seed, `best` is the fallback value the final seeds run at and
    `best_completed` is False."""
    for p in points:
        _outcomes(p, cap, tolerance, lower)
        done = [s for s in p["scores"] if s is not None]
        p["mean"] = stats.mean_sd(done)[0] if done else None
    if not points or any(s not in FAILED + ("completed",) for p in points for s in p["statuses"]):
        return None
    analysis = stats.analyse_curve(points, tolerance, cap, lower)
    analysis["best_completed"] = analysis["best"] is not None
    if analysis["best"] is None:
        analysis["best"] = fallback_value(points)
    return analysis


def _curve(group: dict, exp: dict) -> None:
    keys = ("best", "best_at_edge", "stable", "trainable", "sensitivity", "best_completed")
    analysis = tuning_analysis(group.get("curve") or [], exp["cap"], exp["tolerance"], exp["lower_is_better"])
    group.update({k: (analysis or {}).get(k) for k in keys})


def fallback_value(points: list[dict]):
    """Where no value completed on every tuning seed, the final seeds still run (their failures are the
    finding): at the value with the most completed seeds, then the best mean, then the lowest value."""
    ranked = sorted(
        range(len(points)),
        key=lambda i: (-sum(s == "completed" for s in points[i]["statuses"]), points[i].get("mean") or math.inf, i),
    )
    return points[ranked[0]]["value"]


def _group_numbers(item: dict, limit, lower: bool) -> None:
    """mean, sd, ci95 (cut at the score a completed run cannot pass) and `failed` over the final seeds."""
    done = [s for s in item["scores"] if s is not None]
    item["failed"] = sum(s in FAILED for s in item["statuses"])
    item["mean"], item["sd"] = stats.mean_sd(done) if done else (None, None)
    ci = stats.t_interval(done) if len(done) > 1 else None
    item["ci95"] = stats.within(ci, high=limit) if lower else stats.within(ci, low=limit)


def pair_test(group: dict, ref: dict) -> dict:
    """The tests of `group` against `ref`, before any family: the score test on the seeds both completed
    (paired by seed with 4 or more, else Welch) and the failure counts with Boschloo's test."""
    ref_scores = dict(zip(ref["seeds"], ref["scores"]))
    common = [s for s, x in zip(group["seeds"], group["scores"]) if x is not None and ref_scores.get(s) is not None]
    a = [x for s, x in zip(group["seeds"], group["scores"]) if s in common]
    b = [ref_scores[s] for s in common]
    decided = [(st in FAILED + ("completed",)) for st in group["statuses"]]
    ref_decided = [(st in FAILED + ("completed",)) for st in ref["statuses"]]
    failures = [
        sum(st in FAILED for st in group["statuses"]),
        sum(decided),
        sum(st in FAILED for st in ref["statuses"]),
        sum(ref_decided),
    ]
    out = {
        "test": None,
        "seeds": common,
        "n": [len(common), len(common)],
        "difference": None,
        "se": None,
        "df": None,
        "correlation": None,
        "ci95": None,
        "p": None,
        "failures": failures,
        "p_fail": None,
    }
    if len(common) >= 4:
        r = stats.paired(a, b)
        out.update(test="paired", correlation=r["correlation"])
    elif len(common) >= 2:
        r = stats.welch(a, b)
        out["test"] = "welch"
    else:
        r = None
        if group.get("mean") is not None and ref.get("mean") is not None:
            out["difference"] = group["mean"] - ref["mean"]
    if r is not None:
        out.update(difference=r["difference"], se=r["se"], df=r["df"], ci95=r["ci95"], p=r["p"])
    k, n, k_ref, n_ref = failures
    if (k or k_ref) and n and n_ref:
        out["p_fail"] = stats.boschloo(k, n, k_ref, n_ref)
    return out


def family_words(records: list[tuple[dict, bool, bool, float | None]]) -> int:
    """Holm over every test of one family (each record's score test and failure test), then each record's
    family interval, mde80, equivalence and word. records: (comparison, lower_is_better, at_edge, margin).
    Returns the family's size."""
    tests = [(c, "p") for c, *_ in records if c["p"] is not None]
    tests += [(c, "p_fail") for c, *_ in records if c["p_fail"] is not None]
    m = len(tests)
    for c, *_ in records:
        c["p_holm"] = c["p_fail_holm"] = None
    ps = [c[key] for c, key in tests]
    levels = {}
    for (c, key), adjusted, level in zip(tests, stats.holm(ps), stats.holm_levels(ps, stats.ALPHA)):
        c["p_holm" if key == "p" else "p_fail_holm"] = adjusted
        if key == "p":
            levels[id(c)] = level
    alpha = stats.ALPHA / max(1, m)
    for c, lower, edge, margin in records:
        c["family_size"] = m
        tested = c["se"] is not None
        # the interval at the level Holm's step-down judged this comparison at: it excludes 0 exactly when the
        # word is better or worse
        level = levels.get(id(c), alpha)
        c["ci_family"] = stats.interval(c["difference"], c["se"], c["df"], 1 - level) if tested else None
        c["mde80"] = stats.mde(c["se"], c["df"], alpha) if tested else None
        c["p_equivalence"] = (
            stats.equivalence_p(c["difference"], c["se"], c["df"], margin) if tested and margin else None
        )
        inside = bool(tested and margin and -margin < c["ci_family"][0] and c["ci_family"][1] < margin)
        c["verdict"] = stats.verdict(
            failures=c["failures"],
            n_common=c["n"][0],
            p_fail_holm=c["p_fail_holm"],
            p_holm=c["p_holm"],
            difference=c["difference"],
            p_equivalence=c["p_equivalence"],
            family_size=m,
            at_edge=edge,
            lower_is_better=lower,
            within_margin=inside,
        )
    return m


def _edge(exp: dict, *names: str) -> bool:
    return any(exp["groups"][n].get("best_at_edge") for n in names)


def _experiment(exp: dict) -> None:
    lower, cap, tol = exp["lower_is_better"], exp["cap"], exp["tolerance"]
    limit = None if cap is None else (cap - tol if lower else cap + tol)
    for g in exp["groups"].values():
        _curve(g, exp)
        _outcomes(g, cap, tol, lower)
        _group_numbers(g, limit, lower)
    judge_frontier(exp.get("frontier"), exp["reference"], lambda p: _outcomes(p, cap, tol, lower))
    ref = exp["groups"][exp["reference"]]
    exp["noise_floor"] = ref["sd"]
    exp["pooled_sd"] = stats.pooled_sd([[s for s in g["scores"] if s is not None] for g in exp["groups"].values()])[0]
    noise = exp.get("eval_noise")
    exp["eval_noise_ratio"] = noise / exp["pooled_sd"] if _finite(noise) and exp["pooled_sd"] else None
    exp["comparisons"] = {
        n: dict(pair_test(g, ref), against=exp["reference"]) for n, g in exp["groups"].items() if n != exp["reference"]
    }
    for metric in (exp.get("secondary") or {}).values():
        for g in metric["groups"].values():
            _outcomes(g, metric["cap"], 0.0, metric["lower_is_better"])
            _group_numbers(g, metric["cap"], metric["lower_is_better"])
        mref = metric["groups"][exp["reference"]]
        metric["comparisons"] = {
            n: dict(pair_test(g, mref), against=exp["reference"])
            for n, g in metric["groups"].items()
            if n != exp["reference"]
        }


def judge(verdicts: dict) -> dict:
    """Every derived field of `verdicts` (the raw layer filled in), recomputed in place; returns it."""
    experiments = verdicts["experiments"]
    for exp in experiments.values():
        _experiment(exp)
    # Comparisons the claims read beyond each group against its reference (a block with and without warm-up):
    # tests of the same metric, so they join the same family.
    for exp in experiments.values():
        exp["contrasts"] = {}
    for name, a, b in claim_pairs(experiments):
        exp = experiments[name]
        if b == exp["reference"] or f"{a} vs {b}" in exp["contrasts"]:
            continue
        exp["contrasts"][f"{a} vs {b}"] = dict(pair_test(exp["groups"][a], exp["groups"][b]), group=a, against=b)
    primary = []
    for exp in experiments.values():
        margin = exp.get("margin")
        for n, c in exp["comparisons"].items():
            primary.append((c, exp["lower_is_better"], _edge(exp, n, exp["reference"]), margin))
        for c in exp["contrasts"].values():
            primary.append((c, exp["lower_is_better"], _edge(exp, c["group"], c["against"]), margin))
    m = family_words(primary)
    for exp in experiments.values():
        exp["family_size"] = m
    secondary: dict[str, list] = {}
    for exp in experiments.values():
        for key, metric in (exp.get("secondary") or {}).items():
            for n, c in metric["comparisons"].items():
                edge = _edge(exp, n, exp["reference"])  # scored at the primary metric's best value
                secondary.setdefault(key, []).append((c, metric["lower_is_better"], edge, metric.get("margin")))
    for key, records in secondary.items():
        size = family_words(records)
        for exp in experiments.values():
            if key in (exp.get("secondary") or {}):
                exp["secondary"][key]["family_size"] = size
    verdicts["format"] = FORMAT
    verdicts["claims"] = judge_claims(experiments)
    if any(exp.get("factor") for exp in experiments.values()):
        verdicts["interactions"] = judge_interactions(experiments, lambda exp: exp.get("margin"))
    return verdicts
