"""blocklab compare --preset NAME | SWEEP.toml --out DIR"""

from __future__ import annotations

import argparse
import sys

SWEEP_FORMAT = """\
SWEEP.toml (docs/sweeps.md has every field):
  name = "my-sweep"
  description = "..."
  seeds = [0, 1, 2, 3, 4]   # final seeds (default 5 for a tuned sweep), or "auto" (see [power])
  [tune]                # optional: each group at its own best value of one setting ([experiments.NAME.tune]
  key = "train.lr"      # for one experiment); the final seeds then run at each group's best
  values = [1e-3, 3e-3, 1e-2]   # or min = 1e-4, max = 1e-2, points = 5 (log-spaced)
  seeds = [5, 6]        # tuning seeds (default: the two integers after max(seeds))
  tolerance = 0.1       # ranges; a run not ending this far past the unigram cap failed
  extend = 2            # a best at a grid edge adds up to this many values beyond it
  [compare]             # optional ([experiments.NAME.compare] for one experiment)
  margin = 0.1          # equivalence and non-inferiority margin, in the metric's units
  [power]               # with seeds = "auto": the count of final seeds for this power
  mde = 0.1
  power = 0.8
  min_seeds = 3
  max_seeds = 10
  [[sizes]]             # optional, repeatable: the whole sweep at each size (dotted settings), then a
  "model.d_model" = 64  # frontier of loss against training FLOPs per group
  "train.steps" = 100
  [base.model]          # any [model]/[data]/[train] option of `blocklab train`
  d_model = 128
  [base.train]
  steps = 300
  [grid]                # every combination is one run
  "model.block" = ["pre-ln", "sas-p"]
  "train.lr" = [1e-3, 3e-3]
  [[runs]]              # extra runs, each on top of [base]
  label = "post-ln, no warm-up"
  "model.block" = "post-ln"
  "train.warmup_steps" = 0
  [probes]              # optional: options of `blocklab probe`, run once
  blocks = "pre-ln,sas-p"
  depths = "2,4,8"
  [finetune]            # optional, mlm runs only: fine-tune each afterwards (blocklab finetune)
  tasks = ["variable-misuse", "wrong-operator"]
  seeds = [0, 1, 2]
  epochs = 3
  steps = [200, 400]    # optional: pre-training checkpoints to start from (keep_checkpoints = 0)
  "data.max_examples" = 1000
  # Several experiments in one sweep, each its own report section (tables, figures, target):
  # [experiments.NAME] with title, description and target_run (then no top-level target_run);
  # experiment = "NAME" on every [[runs]] entry, and grid_experiment = "NAME" for the [grid] runs.

Verdicts (docs/verdicts.md): a run completes with a score or fails (diverged, stalled, or ended within
tolerance of the unigram cap); failures are counted, never scored. Each group is compared with its
experiment's reference on the seeds both completed, paired by seed (4 or more) or by Welch, with Boschloo's
test of the failure rates; Holm over the sweep's family; words: fails, fails more often, one seed, at edge,
better, worse, equivalent (two one-sided tests against the margin), unresolved (with mde80, the difference
the test would have seen with 80% power).
"""


def add_parser(sub) -> None:
    from blocklab.experiments.presets import PRESETS

    presets = "\n".join(
        f"  {name:<14} {p['description']}\n  {'':<14} cost: {p['expected_cost']}" for name, p in PRESETS.items()
    )
    p = sub.add_parser(
        "compare",
        help="train several configurations side by side and write a report",
        description="Run a sweep (a preset or a SWEEP.toml) and say which block is better, by how much and how "
        "sure: each group at its own best learning rate (or other tuned setting) on two tuning seeds (a best "
        "at the grid's edge extends the grid), then its final seeds there; DIR/verdicts.json holds every "
        "group's curve, best value, stable and trainable ranges, failures, mean and 95% interval, and each "
        "comparison against the experiment's reference (paired by seed, Holm-corrected across the sweep, "
        "with its family interval and mde80). Every run is an ordinary training run in "
        "DIR/runs/NAME, so an interrupted sweep continues where it stopped when the same command is "
        "run again; a diverged or stalled run is counted as failed and the sweep goes on. A stored run whose "
        "settings differ from what the sweep now asks is never reused (nor are init probes measured with "
        "other options): compare refuses, or with --rerun-changed moves it to DIR/replaced/. Then the init "
        "probes (if the sweep has them) and "
        "`blocklab report DIR`. Dotted overrides (--train.steps 50) apply to every run, over every "
        "other setting; a block's paper recipe (e.g. nGPT: no weight decay, no warm-up) applies "
        "where neither the group nor the command line sets the key.",
        epilog=f"presets:\n{presets}\n\n{SWEEP_FORMAT}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sweep", nargs="?", help="SWEEP.toml file (or use --preset)")
    p.add_argument("--preset", help=f"a built-in sweep: {', '.join(PRESETS)}")
    p.add_argument(
        "--out",
        help="sweep directory (needed unless --list); with --launcher ray, a folder that every node of the "
        "cluster sees and writes (a shared file system: compare checks each node before any run)",
    )
    p.add_argument("--list", action="store_true", help="list the runs and exit without training (needs no --out)")
    p.add_argument(
        "--dump",
        action="store_true",
        help="print the preset as a SWEEP.toml (its shipped file, comments included) and exit: "
        "`compare --preset NAME --dump > my.toml` then `compare my.toml --out DIR` plans the same runs",
    )
    p.add_argument(
        "--experiments",
        help="comma-separated experiments of the sweep to run alone (the others' runs are left out), e.g. clm",
    )
    p.add_argument(
        "--seeds",
        help="comma-separated final seeds replacing the sweep's, e.g. 5,6,7,8,9 (the default tuning seeds follow: "
        "the two integers after the largest), or auto (the count chosen by the sweep's [power] table)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        help="runs at once, each a process with its share of the threads (one per "
        "GPU on several GPUs); default on a CPU: one single-threaded run per "
        "core when every model has d_model <= 256 and there are at least 4 "
        "runs per core, else 1 (measured: benchmarks/RESULTS.md)",
    )
    p.add_argument(
        "--launcher",
        choices=["local", "ray"],
        default="local",
        help="where the runs train: local (default: this machine, --jobs at a time) or ray (each run one Ray "
        "task on a Ray cluster, as many at once as its free CPUs/GPUs allow; needs pip install 'blocklab[ray]', "
        "docs/sweeps.md#on-a-cluster; README 'On a cluster')",
    )
    p.add_argument(
        "--ray-address",
        help="with --launcher ray: the cluster's address, HOST:PORT of its head (default: RAY_ADDRESS; without "
        "either, a local Ray instance on this machine)",
    )
    p.add_argument(
        "--cpus-per-run",
        type=float,
        help="with --launcher ray: CPUs each run asks of the cluster, and its torch threads (default 1)",
    )
    p.add_argument(
        "--gpus-per-run",
        type=float,
        help="with --launcher ray: GPUs each run asks of the cluster; a fraction shares a GPU between runs, "
        "e.g. 0.25 for four small runs on one GPU (default 0: the runs train on CPUs)",
    )
    p.add_argument(
        "--rerun-changed",
        action="store_true",
        help="move stored runs whose settings differ from the sweep's (and init probes measured with other "
        "options than its [probes]) to DIR/replaced/ and train them again (without it, compare refuses such a "
        "directory)",
    )
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args) -> int:
    from pathlib import Path

    from blocklab.errors import UserError
    from blocklab.experiments import load_sweep
    from blocklab.experiments.jobs import default_jobs
    from blocklab.experiments.lock import check_folder, sweep_lock
    from blocklab.training.config import parse_overrides

    if bool(args.preset) == bool(args.sweep):
        raise UserError("give either --preset NAME or a SWEEP.toml file")
    if args.dump:
        from blocklab.experiments.presets import PRESETS, preset_text

        if not args.preset or args.preset not in PRESETS:
            raise UserError(f"--dump prints a preset: give --preset NAME, one of {', '.join(PRESETS)}")
        print(preset_text(args.preset), end="")
        return 0
    launcher = _launcher(args)
    seeds = _seeds(args.seeds) if args.seeds is not None else None
    only = [x for x in args.experiments.split(",") if x] if args.experiments else None
    sweep = load_sweep(args.preset or args.sweep, parse_overrides(args.overrides), seeds, only)
    if args.list:
        _list(sweep)
        return 0
    if not args.out:
        raise UserError("--out DIR is needed to run the sweep (only --list goes without it)")
    jobs = args.jobs or default_jobs([r.config for r in sweep.runs])
    where = f"{jobs} at a time" if launcher is None else "as Ray tasks"
    print(
        f"sweep {sweep.name}: {sweep.n_runs} runs into {args.out}, {where} ({sweep.expected_cost or 'cost unknown'})",
        file=sys.stderr,
    )
    check_folder(Path(args.out), sweep.name)  # a refused folder is said before any worker starts
    with sweep_lock(args.out):  # one compare at a time in DIR, its probes and report included
        if launcher is None:
            from blocklab.experiments.jobs import LocalLauncher

            launcher = LocalLauncher(jobs)
            launcher.prepare()  # the workers import torch while compare plans the first phase
        try:
            return _run_locked(args, sweep, jobs, launcher)
        finally:
            launcher.close()


def _run_locked(args, sweep, jobs: int, launcher) -> int:
    import contextlib
    from pathlib import Path

    from blocklab.errors import UserError
    from blocklab.experiments import run_sweep, start_probes

    result = run_sweep(
        sweep,
        args.out,
        progress=False if args.no_progress else None,
        jobs=jobs,
        rerun_changed=args.rerun_changed,
        log=_log,
        launcher=launcher,
    )
    if result["status"] == "interrupted":
        return 130
    probes = start_probes(sweep, Path(args.out), log=_log)  # alongside the report, which waits for them at the end
    try:
        for line in verdict_lines(result.get("verdicts") or {}):
            print(line)
        print(f"verdicts: {Path(args.out) / 'verdicts.json'}")
        if args.no_report:
            probes.wait()
            return 0
        from blocklab.reporting import write_report

        html, md = write_report(args.out, probes_ready=probes.wait)
        probes.wait()
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):  # the probes' work is kept even when the report cannot be written
            with contextlib.suppress(UserError):
                probes.wait()
        raise
    finally:
        probes.stop()
    print(f"report: {html}\n        {md}")
    from blocklab.training.trackers import track_report

    configs = [r.config for r in sweep.runs + result["finals"]]
    verdicts = Path(args.out) / "verdicts.json"
    used = track_report(Path(args.out), sweep.name, configs, [Path(html), Path(md), verdicts])
    if used:
        _log(f"report logged to {' and '.join(used)}: the run named 'report' in the sweep's group")
    return 0


def _launcher(args):
    """None for the local pool (after checking --jobs), or a RayLauncher whose settings are valid and whose
    package is installed: every such mistake is one line before the sweep is even read."""
    from blocklab.errors import UserError

    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs} is not valid; give a positive number of runs at once")
    ray_only = [f for f, v in (("--ray-address", args.ray_address), ("--cpus-per-run", args.cpus_per_run),
                               ("--gpus-per-run", args.gpus_per_run)) if v is not None]  # fmt: skip
    if args.launcher == "local":
        if ray_only:
            raise UserError(f"{ray_only[0]} goes with --launcher ray")
        return None
    if args.jobs is not None:
        raise UserError(
            "--jobs is the local launcher's; with --launcher ray the cluster's free CPUs and GPUs say how many runs train at once"
        )
    cpus = 1.0 if args.cpus_per_run is None else args.cpus_per_run
    gpus = 0.0 if args.gpus_per_run is None else args.gpus_per_run
    if not cpus > 0:
        raise UserError(f"--cpus-per-run {cpus:g} is not valid; give a positive number of CPUs, e.g. 1")
    if not gpus >= 0 or (gpus > 1 and gpus != int(gpus)):
        raise UserError(
            f"--gpus-per-run {gpus:g} is not valid; give 0, a fraction of one GPU such as 0.25, or whole GPUs"
        )
    if args.list:
        return None
    from blocklab.experiments.ray_launcher import RayLauncher, cluster_address, require_ray

    address = cluster_address(args.ray_address)
    require_ray(address)
    return RayLauncher(address, cpus, gpus)


def _log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def _seeds(text: str) -> list[int] | str:
    from blocklab.errors import UserError

    if text.strip() == "auto":
        return "auto"
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise UserError(
            f"--seeds {text!r} is not valid; give distinct integers >= 0 separated by commas, e.g. 5,6,7,8,9, or auto"
        )
    return seeds


def _list(sweep) -> None:
    for r in sweep.runs:
        print(f"{r.name:<28} {r.label}{' (tuning)' if r.phase == 'tune' else ''}")
    for g in sweep.groups:
        tune = sweep.tune_of(g)
        if tune is not None:
            print(
                f"{g.name + '_...':<28} {g.label}: final seeds {sweep.final_seeds()} at its best {tune.key}, "
                "after tuning"
            )


def verdict_lines(verdicts) -> list[str]:
    """The verdicts in a few lines for the terminal: each comparison's word beside its difference, family
    interval, test and seeds, failures and what it could have missed; then each claim's status. `verdicts`: the
    VerdictsFile record, or the file's content."""
    from blocklab.reporting.verdict_words import comparison_line
    from blocklab.verdicts_record import VerdictsFile

    verdicts = VerdictsFile.of(verdicts)
    lines = []
    for name, exp in (verdicts.experiments or {}).items():
        family = exp.family_size
        lines.append(
            f"{name}: reference {exp.groups[exp.reference].label}"
            + (f" ({family} tests in the family)" if family else "")
        )
        for group, c in exp.comparisons.items():
            g = exp.groups[group]
            best = "" if g.best is None else f" at {short(exp.tuned)} {_value(g.best)}"
            lines.append(f"  {g.label}{best}: {comparison_line(c)}")
    for claim in verdicts.claims or []:
        lines.append(f"claim ({claim.paper}) {claim.claim}: {claim.status}")
    return lines


def short(key) -> str:
    return str(key or "value").rsplit(".", 1)[-1]


def _value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
