"""`blocklab report DIR --rejudge` (docs/verdicts.md): a sweep's verdicts and claims recomputed under the current
rules from the per-seed outcomes DIR/verdicts.json stores, without its runs, and what changed said.

Only the raw layer is read back (RAW_*: the outcomes, the groups' facts and measures, the settings a verdict
is judged by); every derived field is recomputed, so rejudging twice writes the same bytes. A file written
before failures were counted apart (no `format`) is first brought to that layer: a run scored at the cap
then was one that failed, and the groups' facts come from the plan in DIR/sweep.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from blocklab.errors import UserError
from blocklab.experiments.judge import (
    FORMAT,
    RAW_EXPERIMENT,
    RAW_GROUP,
    RAW_METRIC,
    judge,
    pick,
    raw_layer,
)
from blocklab.experiments.protocol import DEFAULT_MARGIN
from blocklab.experiments.records import group_facts
from blocklab.experiments.sweep import group_key
from blocklab.verdicts_record import Experiment, NotVerdicts, VerdictsFile, read_verdicts, verdicts_path


def _old_seeds(seeds, statuses, scores) -> dict:
    """An older record's seeds. A failed run was then scored at the cap: a completed run scored there is kept at
    that score (judge reads it as ended on the plateau, a failure); one that did not complete has none."""
    raw = [score if status == "completed" else None for status, score in zip(statuses, scores)]
    return {"seeds": list(seeds), "statuses": list(statuses), "raw": raw}


def _facts_from_plan(out: Path, plan: dict | None) -> dict:
    """{group key: facts} from DIR/sweep.json's planned runs (final and tuning), each rebuilt as compare built it."""
    if not plan:
        return {}
    from blocklab.reporting.plan import planned_config

    found = {}
    for entry in (plan.get("runs") or []) + (plan.get("tuning") or []):
        if isinstance(entry, dict) and "overrides" in entry and entry.get("group") not in found:
            try:
                found[entry["group"]] = group_facts(planned_config(plan, entry))
            except (UserError, ValueError):
                continue
    return found


def upgrade(verdicts: dict, plan: dict | None, out: Path) -> dict:
    """A verdicts.json written before failures were counted apart, as the raw layer of the current format."""
    facts = _facts_from_plan(out, plan)
    experiments = {}
    for name, exp in verdicts["experiments"].items():
        size = len(exp["sizes"]) - 1 if exp.get("sizes") else None
        groups = {}
        for g_name, g in exp["groups"].items():
            key = group_key(g_name, size)
            curve = [
                {"value": p["value"], **_old_seeds(p["seeds"], p["statuses"], p["scores"]), "extended": False}
                for p in g.get("curve") or []
            ]
            old = {
                **g,
                "facts": g.get("facts") or facts.get(key) or facts.get(g_name) or {},
                "measures": g.get("measures") or {},
                "curve": curve,
                **_old_seeds(g.get("seeds") or [], g.get("statuses") or [], g.get("scores") or []),
            }
            groups[g_name] = pick(old, RAW_GROUP)
        secondary = {}
        for key, m in (exp.get("secondary") or {}).items():
            found = {}
            for g_name, x in m["groups"].items():
                primary = dict(
                    zip(exp["groups"][g_name].get("seeds") or [], exp["groups"][g_name].get("statuses") or [])
                )
                statuses = [primary.get(s, "completed") for s in x.get("seeds") or []]
                found[g_name] = _old_seeds(x.get("seeds") or [], statuses, x.get("scores") or [])
            secondary[key] = pick({**m, "groups": found}, RAW_METRIC)
        defaults = {"margin": DEFAULT_MARGIN, "extend": 0, "seeds_auto": None}
        experiments[name] = pick(
            {**defaults, **exp, "groups": groups, "secondary": secondary, "frontier": None}, RAW_EXPERIMENT
        )
    return {"sweep": verdicts.get("sweep"), "experiments": experiments}


def _read(out: Path) -> dict:
    """DIR/verdicts.json's content, as judge reads it (plain JSON objects); a UserError saying why where it cannot."""
    path = verdicts_path(out)
    try:
        return read_verdicts(out).to_dict()
    except FileNotFoundError:
        raise UserError(f"{path} not found: --rejudge needs the verdicts.json of a finished sweep") from None
    except NotVerdicts:
        raise UserError(f"{path} holds no `experiments` table; nothing to rejudge") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path} could not be read ({type(e).__name__}: {e}); nothing to rejudge") from None


def rejudge(out: str | Path) -> tuple[dict, list[str]]:
    """(DIR/verdicts.json recomputed under the current rules, the lines saying what changed)."""
    out = Path(out)
    old = _read(out)
    if old.get("format") == FORMAT:
        raw = raw_layer(old)
    else:
        plan = _read_plan(out / "sweep.json")
        raw = upgrade(old, plan, out)
    try:
        new = judge(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{verdicts_path(out)} cannot be rejudged ({type(e).__name__}: {e})") from None
    return new, changes(old, new)


def _read_plan(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def changes(old: VerdictsFile | dict, new: VerdictsFile | dict) -> list[str]:
    """What a rejudge changed: each comparison's word and each claim's status."""
    old, new = VerdictsFile.of(old), VerdictsFile.of(new)
    before_all = old.experiment_records
    lines = []
    for name, exp in new.experiments.items():
        before = before_all.get(name) or Experiment()
        for g, c in exp.comparisons.items():
            was = getattr((before.comparisons or {}).get(g), "verdict", None)
            if was != c.verdict:
                lines.append(f"{name}: {exp.groups[g].label}: {was} -> {c.verdict}")
    old_claims = {(c.paper, c.experiment, c.claim): c.status for c in old.claim_records}
    for c in new.claims:
        was = old_claims.get((c.paper, c.experiment, c.claim), "no such claim before")
        if was != c.status:
            lines.append(f"claim {c.paper}, {c.experiment}: {c.claim}: {was} -> {c.status}")
    return lines
