"""Run a sweep into one directory: runs/<name>/ each, then verdicts.json (the init probes and the report follow:
experiments/probe_job.py, cli/compare.py)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import UserError
from blocklab.experiments.jobs import FINISHED, LocalLauncher, costliest_first
from blocklab.experiments.lock import check_folder, sweep_lock
from blocklab.experiments.probe_job import probe_args, stored_options
from blocklab.experiments.stream_probes import run_stream_probes
from blocklab.experiments.sweep import RunSpec, Sweep, run_status
from blocklab.experiments.verdicts import choose_best, compute_verdicts, extension_runs, seed_counts
from blocklab.run_summary import RunSummary, read_summary
from blocklab.training.trackers import default_store, open_store, require
from blocklab.verdicts_record import VerdictsFile, write_verdicts


def check_changed(runs: list[RunSpec], out: Path, rerun_changed: bool, log=print) -> None:
    """A stored run is used only when its settings are the ones asked for: a changed one is refused in one line,
    or with --rerun-changed moved to DIR/replaced/ (kept, never deleted) so that it trains again."""
    from blocklab.training.rundir import changed_settings

    changed = []
    for run in runs:
        run_dir = out / "runs" / run.name
        if (run_dir / "config.toml").is_file():
            diff = changed_settings(run.config, run_dir)
            if diff:
                changed.append((run, run_dir, diff))
    if not changed:
        return
    if not rerun_changed:
        shown = "; ".join(f"{r.name} ({', '.join(d[:3])}{', ...' if len(d) > 3 else ''})" for r, _, d in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise UserError(
            f"{len(changed)} stored run(s) in {out} differ from what the sweep asks: {shown}{more}; "
            "pass --rerun-changed to move them to replaced/ and train them again, or choose another --out"
        )
    for run, run_dir, diff in changed:
        target = _free(out / "replaced", run.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        run_dir.rename(target)
        log(f"{run.name}: settings changed ({', '.join(diff)}); the old run moved to {target}")
    # The verdicts rest on the runs just moved aside: kept beside them, so that no report shows them as this
    # sweep's until the sweep has run to its end and written its own.
    verdicts = out / "verdicts.json"
    if verdicts.is_file():
        keep_aside(verdicts, out)


def check_probes(sweep: Sweep, out: Path, rerun_changed: bool, log=print) -> None:
    """A stored probes.json is kept only when it measured what the sweep's [probes] asks: otherwise refused in
    one line, or with --rerun-changed moved to DIR/replaced/ (kept, never deleted) and measured again."""
    if not sweep.probes:
        return
    wanted = _probe_options(sweep, Path(out))  # a mistake in [probes] is said now, not after the training
    folder = Path(out) / "probes"
    if not (folder / "probes.json").is_file():
        return
    stored = stored_options(out)
    if stored == wanted:
        return
    if stored is None:
        why = "it has no record of its options"
    else:
        keys = sorted(k for k in wanted.keys() | stored.keys() if stored.get(k) != wanted.get(k))
        why = ", ".join(f"{k.replace('_', '-')} {stored.get(k)!r} -> {wanted.get(k)!r}" for k in keys)
    if not rerun_changed:
        raise UserError(
            f"{folder / 'probes.json'} was measured with other options than the sweep's [probes] ({why}); "
            "pass --rerun-changed to move it to replaced/ and measure again, or choose another --out"
        )
    target = keep_aside(folder, Path(out))
    log(f"init probes: options changed ({why}); the old ones moved to {target}")


def _probe_options(sweep: Sweep, out: Path) -> dict:
    """What the sweep's [probes] asks `blocklab probe` to measure; a bad option is one line (argparse's own)."""
    import contextlib
    import io

    from blocklab.probes.runner import options_of, parse_options

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return options_of(parse_options(probe_args(sweep, out)))
    except SystemExit:
        lines = said.getvalue().strip().splitlines()
        why = lines[-1].removeprefix("blocklab probe: error: ") if lines else "not valid"
        raise UserError(f"[probes]: {why}") from None


def keep_aside(path: Path, out: Path) -> Path:
    """Move `path` into DIR/replaced/ under a name nothing holds yet; returns where it went."""
    stem, suffix = path.name.rsplit(".", 1) if "." in path.name else (path.name, "")
    target = _free(out / "replaced", stem, f".{suffix}" if suffix else "")
    target.parent.mkdir(parents=True, exist_ok=True)
    path.rename(target)
    return target


def _free(folder: Path, stem: str, suffix: str = "") -> Path:
    """folder/stem+suffix, or stem-2, -3, ... where that is taken: nothing moved aside is ever overwritten.
    (Run names hold dots, "pre-ln_lr0.001_s0", so the suffix is given, never guessed.)"""
    target, i = folder / f"{stem}{suffix}", 1
    while target.exists():
        i += 1
        target = folder / f"{stem}-{i}{suffix}"
    return target


def plan_json(sweep: Sweep, finals: list[RunSpec]) -> dict:
    """DIR/sweep.json: the sweep's plan, with the command line's settings (applied over every run's) that
    `blocklab report` needs to rebuild each planned run's settings."""
    return dict(sweep.to_json(finals), cli=sweep.cli)


def track_in_sweep(run: RunSpec, sweep: str, out: Path) -> None:
    """A run tracked in MLflow or W&B is grouped under the sweep's name (its MLflow experiment, its W&B group)
    and, with MLflow and no store of the user's, stored in the sweep's folder: written into the run's config,
    so that its config.toml says where it was tracked. Neither changes what the run is (rundir.NO_EFFECT)."""
    t = run.config.train
    if not set(t.trackers) - {"tensorboard"}:
        return
    changes = {"tracker_group": t.tracker_group or sweep}
    if "mlflow" in t.trackers and t.mlflow_uri is None and not os.environ.get("MLFLOW_TRACKING_URI"):
        changes["mlflow_uri"] = default_store(out)
    run.config.train = dataclasses.replace(t, **changes)


def _train_phase(runs: list[RunSpec], sweep: str, out: Path, launcher, progress, log, results: dict, total: int) -> str:
    tasks = []
    for run in costliest_first(runs):
        track_in_sweep(run, sweep, out)
        run_dir = out / "runs" / run.name
        status = run_status(run_dir)
        head = f"[{len(results) + len(tasks) + 1}/{total}] {run.label}"
        if status in FINISHED:
            log(f"{head}: {status} earlier, kept")
            results[run.name] = read_summary(run_dir)
            continue
        tasks.append((run, run_dir, status is not None, head))

    for uri in sorted({t.config.train.mlflow_uri for t, *_ in tasks if "mlflow" in t.config.train.trackers} - {None}):
        open_store(uri)  # made here, once, not by several runs at once (compare --jobs)

    def done(run, head, summary):
        log(
            f"{head}: {summary.status} at step {summary.step}, loss {_f(summary.final_loss)}, "
            f"eval {_f(summary.final_eval_loss)}, {_f(summary.tokens_per_s, '.0f')} tokens/s{_node(summary)}"
        )

    if not tasks:
        return "completed"
    status, trained = launcher.run(tasks, log, progress, done)
    results.update(trained)
    return status


def _node(summary: RunSummary) -> str:
    """Where a run trained, for its progress line, when a launcher placed it on a cluster's node."""
    node = summary.ray_node_id
    return f" on {summary.host} (node {node[:8]})" if node else ""


def _tune_phase(sweep: Sweep, out: Path, launcher, progress, log, results: dict, rerun_changed: bool) -> str:
    """Runs beyond a grid edge where a group's best sits on it (up to each tune's `extend` values a side), until
    no best is at an edge that may still move: each added value joins the sweep's tuning runs."""
    while True:
        extra = [r for r in extension_runs(sweep, out) if r.name not in {x.name for x in sweep.runs}]
        if not extra:
            return "completed"
        for value in dict.fromkeys(r.value for r in extra):
            groups = sorted({r.group for r in extra if r.value == value})
            log(f"grid edge: {', '.join(groups)} best at an edge; adding {_value(value)} beyond it")
        check_changed(extra, out, rerun_changed, log)
        sweep.runs += extra
        write_atomic(out / "sweep.json", json.dumps(plan_json(sweep, sweep.final_runs({})), indent=2) + "\n")
        if _train_phase(extra, sweep.name, out, launcher, progress, log, results, sweep.n_runs) == "interrupted":
            return "interrupted"


def _final_phase(sweep: Sweep, out: Path, finals, launcher, progress, log, results: dict, rerun_changed: bool) -> str:
    known = {r.name for r in sweep.runs}
    extra = [r for r in finals if r.name not in known]
    check_changed(extra, out, rerun_changed, log)
    write_atomic(out / "sweep.json", json.dumps(plan_json(sweep, finals), indent=2) + "\n")
    return _train_phase(extra, sweep.name, out, launcher, progress, log, results, sweep.n_runs)


def _log_best(sweep: Sweep, best: dict, log) -> None:
    for (group, size), value in best.items():
        key = next(sweep.tune_of(g).key for g in sweep.groups if g.name == group)
        log(f"tuned: {group}{'' if size is None else f' (size {size})'} best at {key} = {_value(value)}")


def _value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    progress: bool | None = None,
    log=print,
    jobs: int = 1,
    rerun_changed: bool = False,
    launcher=None,
) -> dict:
    """Train every run not yet finished (completed, diverged or stalled runs are kept; partial ones resume): the
    untuned and tuning runs, then each tuned group's final seeds at its best value; then the fine-tuning stage
    and DIR/verdicts.json. Returns {"status": "completed" | "interrupted", "runs": {name: summary}, "finals"}.
    The runs train through `launcher` (default: this machine, `jobs` at a time; or a RayLauncher), one
    compare at a time in `out` (experiments/lock.py)."""
    out = Path(out)
    for run in sweep.runs:  # a tracker's missing package is said before the first run, not after it
        require(run.config.train)
    launcher = launcher or LocalLauncher(jobs)
    with sweep_lock(out):
        check_folder(out, sweep.name)
        check_changed(sweep.runs, out, rerun_changed, log)
        check_probes(sweep, out, rerun_changed, log)  # said before the training, though they run after it
        launcher.start(out, log)  # a cluster that cannot train into `out` is said before any run starts
        try:
            return _run_phases(sweep, out, launcher, progress, log, rerun_changed)
        finally:
            launcher.close()


def _run_phases(sweep: Sweep, out: Path, launcher, progress, log, rerun_changed: bool) -> dict:
    finals = sweep.final_runs({})
    write_atomic(out / "sweep.json", json.dumps(plan_json(sweep, finals), indent=2) + "\n")
    results: dict = {}
    total = sweep.n_runs
    if _train_phase(sweep.runs, sweep.name, out, launcher, progress, log, results, total) == "interrupted":
        log("sweep interrupted; run the same command again to continue")
        return {"status": "interrupted", "runs": results, "finals": finals}
    counts: dict = {}
    if sweep.tuned:
        if _tune_phase(sweep, out, launcher, progress, log, results, rerun_changed) == "interrupted":
            log("sweep interrupted; run the same command again to continue")
            return {"status": "interrupted", "runs": results, "finals": finals}
        best = choose_best(sweep, out)
        _log_best(sweep, best, log)
        finals = sweep.final_runs(best)
        status = _final_phase(sweep, out, finals, launcher, progress, log, results, rerun_changed)
        if status == "completed" and sweep.auto:
            counts = seed_counts(sweep, out, finals)
            for exp, found in counts.items():
                log(
                    f"seeds: {exp or sweep.name} needs {found['seeds']} final seeds ({found['why']}; pooled sd "
                    f"{_f(found['pooled_sd'])} over the first {sweep.power.min_seeds}, mde {found['mde']:g})"
                )
            finals = sweep.final_runs(best, {e: c["seeds"] for e, c in counts.items()})
            status = _final_phase(sweep, out, finals, launcher, progress, log, results, rerun_changed)
        if status == "interrupted":
            log("sweep interrupted; run the same command again to continue")
            return {"status": "interrupted", "runs": results, "finals": finals}
    if sweep.finetune is not None:
        from blocklab.experiments.downstream import run_finetunes

        if run_finetunes(sweep.finetune, finals, out, progress, log)["status"] == "interrupted":
            log("sweep interrupted while fine-tuning; run the same command again to continue")
            return {"status": "interrupted", "runs": results, "finals": finals}
    if sweep.evaluation is not None:
        from blocklab.experiments.evaluation import run_evals

        run_evals(sweep.evaluation, finals, out, log)
    _note_leftovers(sweep, finals, out, log)
    run_stream_probes(finals, out, log)  # before the verdicts: mHC's claim reads them
    verdicts = VerdictsFile.from_dict(compute_verdicts(sweep, out, finals, counts))
    write_verdicts(out, verdicts)
    return {"status": "completed", "runs": results, "finals": finals, "verdicts": verdicts}


def _note_leftovers(sweep: Sweep, finals: list[RunSpec], out: Path, log) -> None:
    """Runs under DIR/runs that this sweep no longer names (an edited grid, an older version of a preset):
    kept where they are, left out of the verdicts and the report, and said so."""
    names = {r.name for r in sweep.runs + finals}
    left = sorted(p.name for p in (out / "runs").iterdir() if p.is_dir() and p.name not in names)
    if left:
        log(
            f"{len(left)} run(s) in {out / 'runs'} are not part of this sweep ({', '.join(left[:3])}"
            f"{', ...' if len(left) > 3 else ''}): kept, but left out of the verdicts and the report"
        )


def _f(x, fmt=".3f") -> str:
    return "n/a" if x is None else format(x, fmt)
