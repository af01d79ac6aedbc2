"""The compute frontier of a sweep with sizes (docs/verdicts.md, "Sizes"), from the per-seed records of each group
at each size: each point's mean over its completed seeds, each group's power law of score against training
FLOPs, and its compute multiplier against the reference's law."""

from __future__ import annotations

from blocklab import stats


def judge_frontier(frontier: dict | None, reference: str, scored) -> None:
    """Fill `frontier` ({group: {"points": [{size, flops, best, seeds, statuses, raw}]}}) in place. `scored(point)`
    classifies a point's runs and sets its `scores` (None where a run failed)."""
    if not frontier:
        return
    for entry in frontier.values():
        for p in entry["points"]:
            scored(p)
            done = [s for s in p["scores"] if s is not None]
            p["mean"] = stats.mean_sd(done)[0] if done else None
            p["ci95"] = stats.t_interval(done) if len(done) > 1 else None
    ref_usable = _usable(frontier.get(reference, {}).get("points", []))
    for name, entry in frontier.items():
        usable = _usable(entry["points"])
        entry.update(fit=None, multiplier=None, multiplier_ci95=None)
        try:
            entry["fit"] = stats.fit_power_law([p["flops"] for p in usable], [p["mean"] for p in usable])
        except ValueError:
            continue  # fewer than two sizes with a completed run: no fit yet
        if name == reference:
            entry["multiplier"], entry["multiplier_ci95"] = 1.0, [1.0, 1.0]
        elif len(ref_usable) > 1:
            m = stats.compute_multiplier(_scores(ref_usable), _scores(usable))
            entry["multiplier"], entry["multiplier_ci95"] = m["multiplier"], m["multiplier_ci95"]


def _usable(points: list[dict]) -> list[dict]:
    return [p for p in points if p.get("flops") and p.get("mean") is not None]


def _scores(points: list[dict]) -> list[dict]:
    return [{"flops": p["flops"], "scores": [s for s in p["scores"] if s is not None]} for p in points]
