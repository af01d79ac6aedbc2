"""A sweep folder's run folders against its plan, DIR/sweep.json (written by `blocklab compare`).

A stored run is reported as the run its sweep planned only when its settings are the ones the plan asks for:
the comparison `compare` makes before it reuses a run (training/rundir.changed_settings), here between each
run folder's config.toml and the settings sweep.json plans for it. A run edited or trained again by hand, or
copied in from elsewhere, is another run: `blocklab report` refuses it unless told to report it marked, and
never shows verdicts that rest on it (verdicts.json was computed by compare from the runs it planned).
Planned runs without a folder (an interrupted sweep) and run folders the plan does not name are said, not
refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from blocklab.reporting.runs import REPLACED, Run, entry_keys, find_run_dirs, names_folder
from blocklab.reporting.verdicts import Verdicts

MARK = " [changed]"  # after the label of a changed run reported with --allow-changed
LISTED = 8  # names listed in one line of the report; the rest are counted


@dataclass
class PlanCheck:
    changed: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (run, folder, "key stored -> planned")
    missing: list[str] = field(default_factory=list)  # planned runs with no run folder
    extra: list[str] = field(default_factory=list)  # run folders (relative to DIR) that the plan does not name
    unchecked: str | None = None  # why the settings were not compared, when they were not
    withheld: set = field(default_factory=set)  # verdicts.json experiments resting on a changed run


def _entries(sweep: dict) -> list[tuple[str, list[str], dict]]:
    """(name, folder keys, entry) for every run sweep.json plans, final and tuning; a run in both (a tuning
    run reused as a final seed) once."""
    out, seen = [], set()
    for key in ("runs", "tuning"):
        items = sweep.get(key)
        for item in items if isinstance(items, list) else []:
            keys = [item] if isinstance(item, str) else entry_keys(item) if isinstance(item, dict) else []
            if keys and tuple(keys) not in seen:
                seen.add(tuple(keys))
                entry = item if isinstance(item, dict) else {}
                out.append((str(entry.get("name") or keys[0]), keys, entry))
    return out


def planned_config(sweep: dict, entry: dict):
    """The settings the plan gives a run, composed as `blocklab compare` composed them: the sweep's base, the
    run's own overrides (size, recipe, group, tuned value, seed), then the command line's."""
    from blocklab.training.config import load_config

    raw: dict = {}
    for layer in (sweep.get("base") or {}, entry.get("overrides") or {}, sweep.get("cli") or {}):
        for section, values in layer.items():
            raw.setdefault(section, {}).update(values)
    return load_config(None, raw)


def check_plan(root: Path, sweep: dict) -> PlanCheck:
    """Each run folder under `root` against `sweep` (sweep.json's content); nothing to check without its `runs`."""
    from blocklab.errors import UserError
    from blocklab.training.rundir import changed_settings

    check = PlanCheck()
    if not isinstance(sweep.get("runs"), list):
        return check
    entries = _entries(sweep)
    dirs = [d for d in find_run_dirs(root) if d != root]
    rel = {d: d.relative_to(root).as_posix() for d in dirs}
    dirs = [d for d in dirs if not (rel[d] == REPLACED or rel[d].startswith(REPLACED + "/"))]
    planned = any("overrides" in entry for _, _, entry in entries)
    # sweep.json records the command line's settings since the report compares with it; an older one
    # cannot say what the runs were asked for
    checkable = planned and isinstance(sweep.get("cli"), dict) and isinstance(sweep.get("base") or {}, dict)
    if planned and not checkable:
        check.unchecked = (
            "not made: this sweep.json does not record the command line's settings of the compare that wrote "
            "it (an older blocklab), so the runs' settings cannot be compared with the plan; the same compare "
            "command run again records them, and refuses runs whose settings differ"
        )
    used = set()
    for name, keys, entry in entries:
        folder = next((d for d in dirs if d not in used and names_folder(rel[d], keys)), None)
        if folder is None:
            check.missing.append(name)
            continue
        used.add(folder)
        if not (checkable and "overrides" in entry):
            continue
        try:
            diff = changed_settings(planned_config(sweep, entry), folder)
        except UserError as e:  # a setting this blocklab no longer knows
            diff = [f"a plan this blocklab cannot read ({e})"]
        if diff:
            check.changed.append((name, rel[folder], diff))
            check.withheld.add(str(entry.get("experiment") or sweep.get("name")))
    check.extra = [rel[d] for d in dirs if d not in used]
    return check


def _some(names: list[str]) -> str:
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


def _changes(check: PlanCheck, n: int) -> str:
    shown = "; ".join(f"{name} ({', '.join(d[:3])}{', ...' if len(d) > 3 else ''})" for name, _, d in check.changed[:n])
    return shown + (f" and {len(check.changed) - n} more" if len(check.changed) > n else "")


def refusal(check: PlanCheck, root: Path) -> str:
    """The one line `blocklab report` refuses changed runs with."""
    return (
        f"{len(check.changed)} stored run(s) in {root} differ from the plan in its sweep.json (stored -> planned): "
        f"{_changes(check, 3)}; pass --allow-changed to report them marked as changed (without the verdicts that "
        "rest on them), or run the sweep's compare again with --rerun-changed to train them as planned"
    )


def mark_changed(runs: list[Run], check: PlanCheck) -> None:
    """Changed runs reported anyway carry MARK in their label, in every table and legend."""
    folders = {folder for _, folder, _ in check.changed}
    for r in runs:
        if r.exists and r.name in folders:
            r.label += MARK


def plan_rows(check: PlanCheck, shown: set[str]) -> list[tuple[str, str]]:
    """The check's findings as the report's header rows (label, text); `shown`: the folders the tables show."""
    rows = []
    if check.changed:
        rows.append(
            (
                "Changed runs",
                f"{len(check.changed)} run(s) whose settings differ from the plan in sweep.json (stored -> "
                f"planned), reported with --allow-changed and marked{MARK}: {_changes(check, LISTED)}. They are "
                "not the runs the sweep planned: the verdicts that rest on them are left out.",
            )
        )
    if check.missing:
        rows.append(
            (
                "Missing runs",
                f"{len(check.missing)} planned run(s) have no run folder (not trained yet, or removed): "
                f"{_some(check.missing)}.",
            )
        )
    if check.extra:
        inside = [x for x in check.extra if x in shown]
        outside = [x for x in check.extra if x not in shown]
        parts = ([f"shown in the tables: {_some(inside)}"] if inside else []) + (
            [f"left out of the report: {_some(outside)}"] if outside else []
        )
        rows.append(
            (
                "Not planned",
                f"{len(check.extra)} run folder(s) that sweep.json does not plan, so not part of the sweep or its "
                f"verdicts; {'; '.join(parts)}.",
            )
        )
    if check.unchecked:
        rows.append(("Settings check", check.unchecked))
    return rows


def withhold(v: Verdicts, check: PlanCheck) -> Verdicts:
    """`v` without the experiments (and their claims) that rest on a changed run; all of it when a changed run's
    experiment is not one verdicts.json names."""
    exps = v.experiments
    if not check.withheld or not exps:
        return v
    gone = check.withheld & set(exps) if check.withheld <= set(exps) else set(exps)
    kept = {k: e for k, e in exps.items() if k not in gone}
    claims = [c for c in v.claims if c.experiment in kept]
    note = (
        f"verdicts.json: the verdicts of {', '.join(sorted(gone))} are left out: they rest on runs whose settings "
        "differ from the plan (reported with --allow-changed)."
    )
    return Verdicts(replace(v.data, experiments=kept, claims=claims), note, v.present)
