"""Factors (docs/sweeps.md, docs/verdicts.md): an experiment crossed with a setting, such as the optimizer.

  [experiments.NAME.factor]
  key = "train.optimizer"
  levels = ["adamw", "muon"]

Every group runs at every level, tuned per cell, the same seeds at every cell: the experiment becomes one
experiment per level (`NAME-LEVEL`, each group `GROUP-LEVEL` against the reference at that level), judged as any
other. On top of them, `interactions` asks whether a group's difference from the reference changes with the
level: per seed, the difference of the two levels' differences, tested paired, in a family of its own. A group
`flips` when its difference is Holm-significant at both levels with opposite signs; keeps the `same order` when
both are significant with one sign, or the interaction is equivalent to 0; else `unresolved`.
"""

from __future__ import annotations

import re

from blocklab import stats
from blocklab.errors import UserError

FACTOR_KEYS = ("key", "levels")


def _slug(value) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "level"


def _check(name: str, factor, tune) -> tuple[str, list]:
    where = f"experiments.{name}.factor"
    if not isinstance(factor, dict):
        raise UserError(f'{where} must be a table: key = "train.optimizer", levels = ["adamw", "muon"]')
    unknown = sorted(set(factor) - set(FACTOR_KEYS))
    if unknown:
        raise UserError(f"unknown field {unknown[0]!r} in {where}; valid: {', '.join(FACTOR_KEYS)}")
    key, levels = factor.get("key"), factor.get("levels")
    section, _, option = str(key).partition(".")
    if section not in ("model", "data", "train") or not option:
        raise UserError(f'{where}.key={key!r} is not valid; it must be a dotted setting such as "train.optimizer"')
    if key in ("train.seed", "model.block") or (isinstance(tune, dict) and tune.get("key", "train.lr") == key):
        raise UserError(
            f"{where}.key={key!r} cannot be a factor: seeds, blocks and the tuned setting have their own place"
        )
    if not isinstance(levels, list) or len(levels) < 2 or len({_slug(v) for v in levels}) != len(levels):
        raise UserError(f"{where}.levels={levels!r} is not valid; it must be a list of two or more distinct values")
    return key, levels


def expand_factors(spec: dict) -> tuple[dict, dict]:
    """(the sweep `spec` with every experiment that has a factor replaced by one experiment per level, {experiment:
    {"key", "levels", "experiments": {level slug: name}, "groups": {cell group: base group}}})."""
    table = spec.get("experiments")
    if not isinstance(table, dict) or not any(isinstance(m, dict) and "factor" in m for m in table.values()):
        if spec.get("factor") is not None:
            raise UserError("a factor belongs to an experiment: [experiments.NAME.factor] key = ..., levels = [...]")
        return spec, {}
    experiments, runs, factors = {}, [], {}
    for name, meta in table.items():
        if not (isinstance(meta, dict) and "factor" in meta):
            experiments[name] = meta
            runs += [r for r in spec.get("runs", []) if r.get("experiment") == name]
            continue
        key, levels = _check(name, meta["factor"], meta.get("tune"))
        own = [r for r in spec.get("runs", []) if r.get("experiment") == name]
        info = {"key": key, "levels": list(levels), "experiments": {}, "groups": {}}
        for level in levels:
            lv = _slug(level)
            cell = f"{name}-{lv}"
            target = meta.get("target_run") or (own[0].get("name") if own else None)
            experiments[cell] = {k: v for k, v in meta.items() if k != "factor"} | {
                "title": f"{meta.get('title') or name} ({key} = {level})",
                "target_run": f"{target}-{lv}" if target else None,
            }
            info["experiments"][lv] = cell
            for r in own:
                if key in r:
                    raise UserError(f"run {r.get('name')!r} sets {key}, the factor of experiment {name!r}; drop it")
                base = r.get("name") or r.get("label")
                info["groups"][f"{base}-{lv}"] = base
                runs.append(
                    dict(r, name=f"{base}-{lv}", label=f"{r.get('label') or base}, {level}", experiment=cell)
                    | {key: level}
                )
        factors[name] = info
    return dict(spec, experiments=experiments, runs=runs), factors


def judge_interactions(experiments: dict, margin_of) -> dict:
    """{experiment: {group: interaction}} for every factor of the sweep (each experiment of a level carries
    "factor": {"name", "key", "level", "levels"} and its groups the base name in facts["factor_group"]); the
    interactions form one family."""
    cells: dict[str, dict] = {}
    for name, exp in experiments.items():
        f = exp.get("factor")
        if f:  # f["level"]: the level's slug, as the cell experiments are named
            cell = cells.setdefault(f["name"], {"key": f["key"], "levels": f["levels"], "by_level": {}})
            cell["by_level"][f["level"]] = name
    out: dict[str, dict] = {}
    records = []
    for base_exp, info in cells.items():
        first = info["by_level"].get(_slug(info["levels"][0]))
        if first is None:
            continue
        for level in info["levels"][1:]:
            other = info["by_level"].get(_slug(level))
            if other is None:
                continue
            for group, entry in _pairs(experiments[first], experiments[other]).items():
                key = group if len(info["levels"]) == 2 else f"{group} ({level})"
                entry |= {"factor": info["key"], "levels": [info["levels"][0], level]}
                out.setdefault(base_exp, {})[key] = entry
                records.append((entry, margin_of(experiments[first])))
    _family(records)
    return out


def _base(exp: dict) -> dict:
    """{base group: cell group} of one level's experiment."""
    return {(g.get("facts") or {}).get("factor_group", n): n for n, g in exp["groups"].items()}


def _per_seed(exp: dict, group: str) -> dict:
    """{seed: the group's score minus the reference's} where both completed."""
    g, ref = exp["groups"][group], exp["groups"][exp["reference"]]
    ref_scores = dict(zip(ref["seeds"], ref["scores"]))
    return {
        s: x - ref_scores[s] for s, x in zip(g["seeds"], g["scores"]) if x is not None and ref_scores.get(s) is not None
    }


def _pairs(a: dict, b: dict) -> dict:
    """{base group: the interaction's raw test} between two levels' experiments."""
    base_a, base_b = _base(a), _base(b)
    ref_base = (a["groups"][a["reference"]].get("facts") or {}).get("factor_group", a["reference"])
    out = {}
    for base, ga in base_a.items():
        gb = base_b.get(base)
        if base == ref_base or gb is None:
            continue
        ca, cb = a["comparisons"][ga], b["comparisons"][gb]
        da, db = _per_seed(a, ga), _per_seed(b, gb)
        seeds = sorted(set(da) & set(db))
        entry = {
            "groups": [ga, gb],
            "difference": [ca.get("difference"), cb.get("difference")],
            "p_holm_levels": [ca.get("p_holm"), cb.get("p_holm")],
            "seeds": seeds,
            "interaction": None,
            "se": None,
            "df": None,
            "ci95": None,
            "p": None,
        }
        if len(seeds) >= 2:
            r = stats.paired([db[s] for s in seeds], [da[s] for s in seeds])
            entry.update(interaction=r["difference"], se=r["se"], df=r["df"], ci95=r["ci95"], p=r["p"])
        out[base] = entry
    return out


def _family(records: list[tuple[dict, float | None]]) -> None:
    tested = [e for e, _ in records if e["p"] is not None]
    ps = [e["p"] for e in tested]
    m = len(tested)
    for e, level, adjusted in zip(tested, stats.holm_levels(ps, stats.ALPHA), stats.holm(ps)):
        e["p_holm"], e["_level"] = adjusted, level
    alpha = stats.ALPHA / max(1, m)
    for e, margin in records:
        e.setdefault("p_holm", None)
        e["family_size"] = m
        level = e.pop("_level", alpha)
        e["ci_family"] = stats.interval(e["interaction"], e["se"], e["df"], 1 - level) if e["se"] is not None else None
        signif = [p is not None and p < stats.ALPHA for p in e["p_holm_levels"]]
        signs = [d is not None and d < 0 for d in e["difference"]]
        equivalent = bool(
            e["se"] is not None
            and margin
            and stats.equivalence_p(e["interaction"], e["se"], e["df"], margin) < alpha
            and -margin < e["ci_family"][0]
            and e["ci_family"][1] < margin
        )
        if all(signif) and signs[0] != signs[1]:
            e["verdict"] = "flips"
        elif (all(signif) and signs[0] == signs[1]) or equivalent:
            e["verdict"] = "same order"
        else:
            e["verdict"] = "unresolved"
