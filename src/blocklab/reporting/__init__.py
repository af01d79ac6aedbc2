"""The report of a sweep: `blocklab report DIR` and the end of `blocklab compare`.

- `write_report(dir, target_loss=None) -> (html_path, md_path)`: DIR/report.html (self-contained:
  inline CSS, figures as base64 data URIs, works offline) and DIR/report.md (figures in DIR/figures/).
- `generate_report(...)` does the same and returns the `Report` (table rows, Markdown table, target).
- `load_runs(dir)`: the run directories of a sweep, read (sweep.json order and labels when present).
"""

from blocklab.reporting.analysis import choose_target, markdown_table, smooth, steps_to_target
from blocklab.reporting.report import Report, build_report, generate_report, write_report
from blocklab.reporting.runs import Run, find_run_dirs, load_run, load_runs

__all__ = [
    "write_report",
    "generate_report",
    "build_report",
    "Report",
    "load_runs",
    "load_run",
    "find_run_dirs",
    "Run",
    "choose_target",
    "steps_to_target",
    "smooth",
    "markdown_table",
]
