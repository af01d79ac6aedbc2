"""Run a sweep into one directory: runs/<name>/ each, then the init probes, then the report."""
from __future__ import annotations

import json
from pathlib import Path

from blocklab.errors import UserError
from blocklab.experiments.sweep import Sweep, run_status
from blocklab.atomic import write_atomic

FINISHED = ("completed", "diverged", "stalled")  # kept as they are when the sweep is run again


def run_sweep(sweep: Sweep, out: str | Path, progress: bool | None = None, log=print) -> dict:
    """Train every run not yet finished (completed, diverged or stalled runs are kept; partial ones resume).

    Returns {"status": "completed" | "interrupted", "runs": {name: summary}}.
    """
    from blocklab.training import train

    out = Path(out)
    saved = out / "sweep.json"
    if saved.is_file():
        previous = json.loads(saved.read_text())
        if previous.get("name") != sweep.name or [r["name"] for r in previous["runs"]] != [r.name for r in sweep.runs]:
            raise UserError(f"{out} holds the sweep {previous.get('name')!r} with other runs; choose another --out")
    elif out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty and holds no blocklab sweep; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(saved, json.dumps(sweep.to_json(), indent=2) + "\n")
    results = {}
    for i, run in enumerate(sweep.runs, 1):
        run_dir = out / "runs" / run.name
        status = run_status(run_dir)
        head = f"[{i}/{len(sweep.runs)}] {run.label}"
        if status in FINISHED:
            log(f"{head}: {status} earlier, kept")
            results[run.name] = json.loads((run_dir / "summary.json").read_text())
            continue
        log(f"{head}: {'resuming' if status else 'training'} ({run.config.train.steps} steps)")
        summary = train(run.config, run_dir, resume=status is not None, progress=progress, log=log)
        results[run.name] = summary
        log(f"{head}: {summary['status']} at step {summary['step']}, loss {_f(summary['final_loss'])}, "
            f"eval {_f(summary['final_eval_loss'])}, {_f(summary['tokens_per_s'], '.0f')} tokens/s")
        if summary["status"] == "interrupted":
            log("sweep interrupted; run the same command again to continue")
            return {"status": "interrupted", "runs": results}
    if sweep.finetune is not None:
        from blocklab.experiments.downstream import run_finetunes

        if run_finetunes(sweep.finetune, sweep.runs, out, progress, log)["status"] == "interrupted":
            log("sweep interrupted while fine-tuning; run the same command again to continue")
            return {"status": "interrupted", "runs": results}
    return {"status": "completed", "runs": results}


def run_probes(sweep: Sweep, out: Path, log=print) -> None:
    """The sweep's init probes, once (kept if already there), with the options of `blocklab probe`."""
    if not sweep.probes or (out / "probes" / "probes.json").is_file():
        return
    from blocklab.probes.runner import run_options

    args = ["--out", str(out / "probes")]
    for key, value in sweep.probes.items():
        args += [f"--{key}", str(value)]
    if sweep.base.get("data", {}).get("source") and "data" not in sweep.probes:
        args += ["--data", str(sweep.base["data"]["source"])]
    log("init probes: " + " ".join(args[2:]))
    try:
        run_options(args)
    except UserError as e:
        raise UserError(f"the init probes failed: {e}") from None


def _f(x, fmt=".3f") -> str:
    return "n/a" if x is None else format(x, fmt)
