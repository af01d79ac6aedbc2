"""What the runs of a table share and what sets each apart: the report shows the shared settings once, and
each row only the settings in which its run departs from the others.

Three kinds of config keys (section, key), over the started runs of one table:
- shared: every run has the same value; listed once above the table (`shared_settings`);
- usual: runs differ, but a strict majority has one value; listed once as what "most runs" have, and a
  row names the key only where its run differs (the zoo's one DyT run: `norm=dyt`);
- varying without a majority (a warm-up x learning-rate grid): every row names its value.
The block, and the seed of a seeded sweep, have their own columns and are none of these.
"""

from __future__ import annotations

from blocklab.reporting.runs import Run
from blocklab.settings import applicable
from blocklab.training.config import SECTIONS

# Where a run's numbers were tracked (train.trackers, training/trackers.py) says nothing about its results.
TRACKING = {("train", "trackers"), ("train", "tracker_group"), ("train", "mlflow_uri")}


def _flat_configs(runs: list[Run]) -> dict[str, dict]:
    """{run name: {(section, key): value}} of the runs that have a config (started runs), the tracking
    settings left out, and the settings that apply to none of these runs (settings.applies: a block-only knob
    of a block the table does not have, an SGD setting where every run uses Adam)."""
    started = [r for r in runs if r.exists]
    used = {(sec, k) for r in started for sec, vals in applicable(SECTIONS, r.config).items() for k in vals}
    return {
        r.name: {
            (sec, k): v
            for sec, vals in r.config.items()
            if isinstance(vals, dict)
            for k, v in vals.items()
            if (sec, k) not in TRACKING and (sec, k) in used
        }
        for r in started
    }


def _own_columns(runs: list[Run]) -> set:
    """Settings the tables show in their own columns: the block, and the seed when runs were seeded."""
    return {("model", "block")} | ({("train", "seed")} if any(r.seed is not None for r in runs) else set())


def setting_text(value) -> str:
    """A setting as the report writes it: TOML's true/false, floats short (0.001, 1e-05)."""
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def _varying(flat: dict, runs: list[Run]) -> list[tuple[str, str]]:
    keys = sorted({k for f in flat.values() for k in f})
    fixed = _own_columns(runs)
    return [k for k in keys if k not in fixed and len({repr(f.get(k)) for f in flat.values()}) > 1]


def _short(keys) -> dict:
    """Each key by its name alone ("lr"), or "section.name" where two sections share the name."""
    return {k: k[1] if sum(1 for j in keys if j[1] == k[1]) == 1 else f"{k[0]}.{k[1]}" for k in keys}


def usual_settings(runs: list[Run]) -> dict[tuple[str, str], object]:
    """{(section, key): value} of the keys that differ between runs but have one value in a strict majority
    of them: what "most runs" have; the table names them only in the rows that differ."""
    flat = _flat_configs(runs)
    out = {}
    for k in _varying(flat, runs):
        values = [repr(f.get(k)) for f in flat.values()]
        top = max(set(values), key=values.count)
        if 2 * values.count(top) > len(values) and top != repr(None):
            out[k] = next(f[k] for f in flat.values() if repr(f.get(k)) == top)
    return out


def varying_settings(runs: list[Run]) -> dict[str, str]:
    """{run name: 'lr=0.001 warmup_steps=500'}: the keys in which the run departs from the others, i.e. those
    without a majority value, and those where it differs from the majority's (usual_settings)."""
    flat = _flat_configs(runs)
    if len(flat) < 2:
        return {}
    varying = _varying(flat, runs)
    usual = usual_settings(runs)
    short = _short(varying)

    def shown(k, f) -> bool:
        return k in f and (k not in usual or repr(f[k]) != repr(usual[k]))

    return {
        name: " ".join(f"{short[k]}={setting_text(f[k])}" for k in varying if shown(k, f)) for name, f in flat.items()
    }


def shared_settings(runs: list[Run], known=()) -> dict[tuple[str, str], object]:
    """{(section, key): value}, in config order, of the settings every started run has with one value. The
    block and a seeded sweep's seed have their own columns; `known` keys are left out (shown already for a
    wider set of runs)."""
    flat = list(_flat_configs(runs).values())
    if not flat:
        return {}
    skip = _own_columns(runs) | set(known)
    return {
        k: v for k, v in flat[0].items() if k not in skip and all(k in f and repr(f[k]) == repr(v) for f in flat[1:])
    }


def settings_lines(shared: dict, usual: dict | None = None) -> list[tuple[str, str]]:
    """[(heading, 'd_model=128, n_layers=4, ...')]: one line per config section of `shared`, then a "most
    runs" line of `usual` (in the settings column's short names)."""
    by: dict[str, list[str]] = {}
    for (section, key), value in shared.items():
        by.setdefault(section, []).append(f"{key}={setting_text(value)}")
    lines = [(section, ", ".join(items)) for section, items in by.items()]
    if usual:
        short = _short(list(usual))
        lines.append(
            (
                "most runs",
                ", ".join(f"{short[k]}={setting_text(v)}" for k, v in usual.items())
                + " (the settings column names a run's where they differ)",
            )
        )
    return lines
