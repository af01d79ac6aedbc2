"""blocklab report DIR [--target-loss X] [--allow-changed] [--rejudge] [--summary]"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from blocklab.errors import UserError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML and Markdown report of a sweep or of runs",
        description="Read every run under DIR (DIR/runs/<name>/ as written by `blocklab compare`, a single run "
        "folder, or any folder holding run folders up to three levels down) and write "
        "DIR/report.html, one self-contained page that works offline (figures embedded), and "
        "DIR/report.md with its figures in DIR/figures/. The report holds: training loss against "
        "steps and against wall-clock time, evaluation loss, a table per run (block, parameters, "
        "tokens/s, final train and eval loss, best eval loss, steps to reach a target loss, status), "
        "the init probes of `blocklab probe` when DIR/probes/probes.json exists, and the gain "
        "trajectories. Runs still going (no summary.json) are shown as running/unknown. "
        "In a sweep folder each run folder is checked against the plan in DIR/sweep.json, as compare "
        "checks a stored run before reusing it: a run whose stored settings differ from the planned ones "
        "is refused (see --allow-changed); planned runs without a folder and folders the plan does not "
        "name are listed at the top of the report. "
        "Prints the paths, the table and what the check found.",
        epilog="Examples: blocklab report demo/ --target-loss 4.5\n"
        "          blocklab report results/zoo-h100 --rejudge --summary   (no runs needed)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", metavar="DIR", help="a sweep folder (from blocklab compare), a run folder, or a folder of runs"
    )
    p.add_argument(
        "--target-loss",
        type=float,
        default=None,
        metavar="X",
        help="loss for the 'steps to target' column: the first step at which a run's smoothed training "
        "loss is at or below X (default: the worst final smoothed training loss among the "
        "completed runs, so that every completed run reaches it)",
    )
    p.add_argument(
        "--allow-changed",
        action="store_true",
        help="report run folders whose stored settings differ from what DIR/sweep.json planned for them (a "
        "run edited or trained again by hand, or copied in) instead of refusing: each is marked "
        "[changed] with its differing settings, and the verdicts of verdicts.json that rest on it are "
        "left out (they were computed for the planned runs)",
    )
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="recompute DIR/verdicts.json's verdicts and claims under the current rules from the per-seed "
        "outcomes it stores (no runs needed), and say what changed; the file it replaces is kept in "
        "DIR/replaced/ when it differs. The report is then written when DIR holds the runs",
    )
    p.add_argument(
        "--summary",
        action="store_true",
        help="write DIR/summary.md: every experiment's verdict table and the claims with their rules, as "
        "markdown, for any text that states the sweep's results (the numbers come from verdicts.json)",
    )
    p.set_defaults(func=run)


def _rejudge(root: Path) -> None:
    from blocklab.experiments.rejudge import rejudge
    from blocklab.experiments.runner import keep_aside
    from blocklab.verdicts_record import VerdictsFile, verdicts_path, verdicts_text, write_verdicts

    path = verdicts_path(root)
    judged, changes = rejudge(root)
    new = VerdictsFile.from_dict(judged)
    if verdicts_text(new) == path.read_text():
        print(f"{path}: unchanged under the current rules")
        return
    kept = keep_aside(path, root)
    write_verdicts(root, new)
    print(f"rejudged {path} (the earlier file: {kept})")
    for line in changes or ["no verdict word or claim status changed (other fields did)"]:
        print(f"  {line}")


def _summary(root: Path) -> None:
    from blocklab.atomic import write_atomic
    from blocklab.reporting.summary import summary_markdown
    from blocklab.reporting.verdicts import read_verdicts

    v = read_verdicts(root)
    if v.data is None:
        raise UserError(v.note or f"{root / 'verdicts.json'} not found: --summary needs a finished sweep's verdicts")
    write_atomic(root / "summary.md", summary_markdown(v.data))
    print(f"wrote {root / 'summary.md'}")


def run(args) -> int:
    target = args.target_loss
    if target is not None and (not math.isfinite(target) or target <= 0):
        raise UserError(f"--target-loss {target} is not valid; give a positive loss value")
    from blocklab.atomic import writable_dir
    from blocklab.reporting import generate_report
    from blocklab.reporting.runs import find_run_dirs

    root = Path(args.dir)
    if root.exists():  # the pages and figures go into DIR: checked before the figures are drawn
        writable_dir(args.dir, "report folder")
    if args.rejudge:
        _rejudge(root)
    if args.summary:
        _summary(root)
    if (args.rejudge or args.summary) and not find_run_dirs(root):
        print(f"{root} holds no run folders: its report is left as it was")
        return 0

    report = generate_report(args.dir, target, allow_changed=args.allow_changed)
    print(f"wrote {report.html_path}")
    print(f"wrote {report.md_path}")
    print()
    print(report.table_md)
    print()
    print(report.target.note)
    for label, text in report.plan:
        print(f"{label}: {text}")
    return 0
