"""Find and read the run directories of a sweep: config.toml, metrics.jsonl, summary.json, sweep.json.

A run directory holds `summary.json`, or `metrics.jsonl` together with `config.toml`
(a run still going, or killed before its summary). `find_runs(DIR)` accepts a single run
directory, a sweep directory (`DIR/runs/<name>/`) or any folder whose sub-folders (at most
three levels down) are run directories. Everything here is read-only and tolerant: a
half-written last line of metrics.jsonl is skipped, a missing summary means the run is
still running or was killed.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.errors import UserError
from blocklab.run_summary import RunSummary, read_summary

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_DEPTH = 3
# Folders that belong to a run or to the report, never a run themselves.
# finetune/: a sweep's fine-tuning runs, which the downstream section reads (reporting/downstream.py).
# mlartifacts/, mlruns/, wandb/: the trackers' local stores, whose artifacts hold copies of a run's summary.json.
SKIP_DIRS = {"checkpoints", "tb", "figures", "probes", "finetune", "__pycache__", "mlartifacts", "mlruns", "wandb"}
UNKNOWN_STATUS = "running/unknown"
REPLACED = "replaced"  # DIR/replaced/: runs moved aside by `compare --rerun-changed`, never the report's


def is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file() or (
        (path / "metrics.jsonl").is_file() and (path / "config.toml").is_file()
    )


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.as_posix())]


def find_run_dirs(root: str | Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Every run directory at `root` or up to `max_depth` levels below it, in natural path order."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    found, level = [], [root]
    for _ in range(max_depth):
        nxt = []
        for d in level:
            try:
                children = sorted(p for p in d.iterdir() if p.is_dir())
            except OSError:
                continue
            for c in children:
                if c.name.startswith(".") or c.name in SKIP_DIRS:
                    continue
                (found if is_run_dir(c) else nxt).append(c)
        level = nxt
    return sorted(found, key=lambda p: _natural(p.relative_to(root)))


def read_metrics(path: Path) -> tuple[list[dict], int]:
    """(rows sorted by step, one per step: the last one logged wins; number of unreadable lines skipped)."""
    by_step: dict[int, dict] = {}
    skipped = 0
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            skipped += 1  # a half-written line from a kill, or garbage
            continue
        if isinstance(row, dict):
            by_step[step] = dict(row, step=step)
    return [by_step[s] for s in sorted(by_step)], skipped


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass
class Run:
    """One run directory, read."""

    path: Path
    name: str  # path relative to the report folder ("." for a single run)
    label: str
    config: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    summary: RunSummary | None = None  # None: no summary.json (still running, or killed)
    skipped_lines: int = 0
    exists: bool = True  # False: listed in sweep.json, no directory yet
    group: str = ""  # runs that differ only in their seed share a group (sweep.json)
    group_label: str = ""
    seed: int | None = None
    experiment: str = ""  # the sweep's experiment this run belongs to (sweep.json); "" when none

    def __post_init__(self):
        self.group = self.group or self.name
        self.group_label = self.group_label or self.label

    def cfg(self, section: str, key: str, default=None):
        return (self.config.get(section) or {}).get(key, default)

    @property
    def block(self) -> str:
        return (self.summary and self.summary.block) or self.cfg("model", "block") or "?"

    @property
    def family(self) -> str:
        """The block's family (its BlockSpec's: classic, simplified, successor, ablation); "" when unknown."""
        from blocklab.blocks import REGISTRY

        spec = REGISTRY.get(self.block)
        return spec.family if spec else ""

    @property
    def status(self) -> str:
        if not self.exists:
            return "not started"
        return self.summary.status if self.summary else UNKNOWN_STATUS

    @property
    def total_steps(self):
        return (self.summary and self.summary.steps) or self.cfg("train", "steps")

    @property
    def last_step(self):
        if self.summary and self.summary.step is not None:
            return self.summary.step
        return self.rows[-1]["step"] if self.rows else 0

    def series(self, key: str, x: str = "step") -> tuple[list[float], list[float]]:
        """(xs, values) over the rows where both `x` and `key` are finite numbers."""
        xs, ys = [], []
        for r in self.rows:
            if _finite(r.get(key)) and _finite(r.get(x)):
                xs.append(float(r[x]))
                ys.append(float(r[key]))
        return xs, ys

    @property
    def has_gains(self) -> bool:
        return any(k.startswith("gain/") for r in self.rows for k in r)


def load_run(path: Path, name: str, label: str | None = None) -> Run:
    rows, skipped = read_metrics(path / "metrics.jsonl")
    return Run(
        path=path,
        name=name,
        label=label or (path.name if name == "." else name),
        config=_read_toml(path / "config.toml"),
        rows=rows,
        summary=read_summary(path),
        skipped_lines=skipped,
    )


def read_sweep(root: Path) -> dict:
    """DIR/sweep.json as a dict ({} when absent or unreadable)."""
    return _read_json(root / "sweep.json") or {}


def entry_keys(item: dict) -> list[str]:
    """The folder names/paths that a sweep.json entry (a dict) may go by, most specific first."""
    return [str(item[k]) for k in ("dir", "path", "out", "run_dir", "name", "id") if item.get(k)]


def _sweep_entries(sweep: dict, key: str = "runs") -> list[tuple[list[str], str | None, dict]]:
    """[(candidate folder names/paths, label, seed group)] from sweep.json's `runs` (or `key`'s list: `tuning`),
    strings or dicts."""
    out = []
    items = sweep.get(key)
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            out.append(([item], None, {}))
        elif isinstance(item, dict):
            keys = entry_keys(item)
            label = item.get("label") or item.get("name")
            group = {k: item[k] for k in ("group", "group_label", "seed", "experiment") if item.get(k) is not None}
            if keys:
                out.append((keys, str(label) if label else None, group))
    return out


def load_runs(root: str | Path) -> tuple[list[Run], dict]:
    """(runs in report order, sweep.json content). Raises UserError when DIR is missing or holds no run.

    With sweep.json: its runs first, in its order and with its labels (a listed run without
    a directory yet is kept, as `not started`), then any other run found on disk, except the tuning runs
    sweep.json lists under `tuning` and the runs under DIR/replaced/ (_not_report_runs).
    """
    root = Path(root)
    if not root.exists():
        raise UserError(f"{root} does not exist")
    if not root.is_dir():
        raise UserError(f"{root} is not a folder; give a sweep folder or a run folder")
    dirs = find_run_dirs(root)
    sweep = read_sweep(root)
    if not dirs:
        raise UserError(
            f"no runs found in {root} (looked for run folders with summary.json, "
            f"or metrics.jsonl and config.toml, up to {MAX_DEPTH} levels down)"
        )
    rel = {d: ("." if d == root else d.relative_to(root).as_posix()) for d in dirs}
    aside = _not_report_runs(dirs, rel, sweep)
    dirs = [d for d in dirs if d not in aside]
    runs, used = [], set()
    for keys, label, group in _sweep_entries(sweep):
        match = None
        for key in keys:
            key_path = Path(key)
            for d in dirs:
                if d in used:
                    continue
                if (
                    rel[d] == key_path.as_posix().strip("/")
                    or d.name == key_path.name
                    or d.resolve() == (root / key_path).resolve()
                ):
                    match = d
                    break
            if match:
                break
        if match is not None:
            used.add(match)
            runs.append(load_run(match, rel[match], label))
        else:
            name = keys[0]
            runs.append(Run(path=root / name, name=name, label=label or Path(name).name, exists=False))
        for key, value in group.items():
            setattr(runs[-1], key, value)
    runs.extend(load_run(d, rel[d]) for d in dirs if d not in used)
    if not runs:
        raise UserError(
            f"no runs to report in {root}: its run folders are all tuning runs (sweep.json's "
            f"`tuning`) or old runs under {REPLACED}/"
        )
    _dedupe_labels(runs)
    return runs, sweep


def names_folder(rel: str, keys: list[str]) -> bool:
    """An entry's keys name the folder: its path from DIR, or its folder name for a key that is a bare name."""
    return any(rel == Path(k).as_posix().strip("/") or ("/" not in k and rel.rsplit("/", 1)[-1] == k) for k in keys)


def _not_report_runs(dirs: list[Path], rel: dict, sweep: dict) -> set[Path]:
    """The run folders that are not the sweep's results: everything under DIR/replaced/ (old runs that
    `compare --rerun-changed` moved aside) and the tuning runs sweep.json lists under `tuning` (their scores
    reach the report through verdicts.json). A tuning run that `runs` lists too (reused as a final seed) stays."""
    aside = {d for d in dirs if rel[d] == REPLACED or rel[d].startswith(REPLACED + "/")}
    final = [keys for keys, _, _ in _sweep_entries(sweep)]
    tuning = [keys for keys, _, _ in _sweep_entries(sweep, "tuning")]
    for keys in tuning:
        aside |= {d for d in dirs if names_folder(rel[d], keys) and not any(names_folder(rel[d], k) for k in final)}
    if "tuning" in sweep:  # compare lists every run of the sweep: the rest under runs/ are an older sweep's
        aside |= {
            d for d in dirs if rel[d].startswith("runs/") and not any(names_folder(rel[d], k) for k in final + tuning)
        }
    return aside


def family_order(runs: list[Run]) -> list[Run]:
    """The runs by family (registry.FAMILIES order), then block (registry order); otherwise as given, so the
    runs of one block keep the sweep's order. Blocks the registry does not know come last."""
    from blocklab.blocks import REGISTRY
    from blocklab.registry import FAMILIES

    blocks = list(REGISTRY)

    def key(r: Run):
        if r.block not in REGISTRY:
            return (len(FAMILIES), len(blocks))
        return (FAMILIES.index(REGISTRY[r.block].family), blocks.index(r.block))

    return sorted(runs, key=key)


def _dedupe_labels(runs: list[Run]) -> None:
    seen: dict[str, int] = {}
    for r in runs:
        if r.label in seen:
            seen[r.label] += 1
            r.label = f"{r.label} ({r.name})" if r.name != r.label else f"{r.label} #{seen[r.label]}"
        else:
            seen[r.label] = 1
