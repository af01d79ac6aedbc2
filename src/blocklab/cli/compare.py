"""blocklab compare --preset NAME | SWEEP.toml --out DIR"""
from __future__ import annotations

import argparse

SWEEP_FORMAT = """\
SWEEP.toml:
  name = "my-sweep"
  description = "..."
  seeds = [0, 1]        # optional: every run once per seed; the report shows mean ± sd
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
"""


def add_parser(sub) -> None:
    from blocklab.experiments.presets import PRESETS

    presets = "\n".join(f"  {name:<14} {p['description']}\n  {'':<14} cost: {p['expected_cost']}"
                        for name, p in PRESETS.items())
    p = sub.add_parser(
        "compare", help="train several configurations side by side and write a report",
        description="Run a sweep (a preset or a SWEEP.toml): every run is an ordinary training run in "
                    "DIR/runs/NAME, so an interrupted sweep continues where it stopped when the same command "
                    "is run again; a diverged or stalled run is recorded and the sweep goes on. Then the init probes "
                    "(if the sweep has them) and `blocklab report DIR`. Dotted overrides "
                    "(--train.steps 50) apply to every run.",
        epilog=f"presets:\n{presets}\n\n{SWEEP_FORMAT}", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", nargs="?", help="SWEEP.toml file (or use --preset)")
    p.add_argument("--preset", help=f"a built-in sweep: {', '.join(PRESETS)}")
    p.add_argument("--out", required=True, help="sweep directory")
    p.add_argument("--list", action="store_true", help="list the runs and exit without training")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args) -> int:
    from pathlib import Path

    from blocklab.errors import UserError
    from blocklab.experiments import load_sweep, run_probes, run_sweep
    from blocklab.training.config import parse_overrides

    if bool(args.preset) == bool(args.sweep):
        raise UserError("give either --preset NAME or a SWEEP.toml file")
    sweep = load_sweep(args.preset or args.sweep, parse_overrides(args.overrides))
    if args.list:
        for r in sweep.runs:
            print(f"{r.name:<24} {r.label}")
        return 0
    print(f"sweep {sweep.name}: {len(sweep.runs)} runs into {args.out} ({sweep.expected_cost or 'cost unknown'})")
    result = run_sweep(sweep, args.out, progress=False if args.no_progress else None)
    if result["status"] == "interrupted":
        return 130
    run_probes(sweep, Path(args.out))
    if not args.no_report:
        from blocklab.reporting import write_report

        html, md = write_report(args.out)
        print(f"report: {html}\n        {md}")
    return 0
