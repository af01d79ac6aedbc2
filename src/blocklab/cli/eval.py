"""blocklab eval --run DIR --tasks NAMES [--step N] [--limit N]: the evaluation itself is blocklab.hf.evaluation's."""

from __future__ import annotations

# blocklab's shipped tasks (blocklab.hf.eval_tasks.SHIPPED, which a test keeps equal to this), here so that
# --tasks list answers without transformers or the harness, or before they are installed.
SHIPPED_TASKS = {
    "blocklab_val_bpb": "bits per byte of the run's held-out validation documents (rolling log-likelihood, as wikitext)",
    "blocklab_exception_type": "which exception class the masked except clause names (class names as choices)",
    "blocklab_variable_misuse": "the function or its copy with one variable use replaced: which is more likely",
    "blocklab_wrong_operator": "the function or its copy with one binary operator replaced",
    "blocklab_swapped_operand": "the function or its copy with the operands of one operator swapped",
    "blocklab_docstring_mismatch": "which of two docstrings makes the function's body more likely",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a run with the lm-eval harness (its tasks, or blocklab's offline ones)",
        description="Evaluate a clm run's checkpoint with the lm-eval harness, on the model exported for "
        "transformers (kept in RUN/hf-export/step-N). Tasks: any lm-eval task whose data is on this machine "
        "(nothing is downloaded: the hub is offline), a task of your own as a harness task config file "
        "(--tasks path/to/task.yaml: lm-eval's YAML format, its data on local files), and blocklab's own offline "
        "tasks, made from the run's data (--tasks list names them): the held-out validation split's bits per byte, "
        "and the five code tasks as zero-shot choices between texts by log-likelihood. One line per task says "
        "its documents and time as it finishes. Results go to RUN/eval/ (JSON, the harness's results and the "
        "settings); a stored result with the same tasks, limit and checkpoint is printed again without "
        "evaluating. Needs the eval extra: pip install 'blocklab[eval]'.",
    )
    p.add_argument("--run", help="run directory written by blocklab train (a clm run); not needed with --tasks list")
    p.add_argument(
        "--tasks",
        required=True,
        help="comma-separated task names: lm-eval's (e.g. hellaswag, arc_easy), blocklab's (blocklab_val_bpb, "
        "blocklab_wrong_operator, ...) and task config files (path/to/task.yaml, lm-eval's format); 'list' prints "
        "blocklab's tasks and what each measures",
    )
    p.add_argument("--step", type=int, default=None, help="the checkpoint step to evaluate (default: the latest)")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="at most this many documents per task, the first in the task's order (blocklab's code tasks come "
        "in a fixed shuffled order, the validation documents in corpus order) (default: every document)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass of the harness (default: 8)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.set_defaults(func=run)


def run(args) -> int:
    from blocklab.cli import status
    from blocklab.cli.output import print_lines
    from blocklab.errors import UserError, import_extra

    if args.tasks.strip() == "list":
        width = max(map(len, SHIPPED_TASKS))
        print_lines(f"{name:<{width}}  {what}" for name, what in SHIPPED_TASKS.items())
        return 0
    if not args.run:
        raise UserError("--run is required (the clm run to evaluate)")
    if args.step is not None and args.step < 0:
        raise UserError(f"--step {args.step} is not valid; give a checkpoint's step (>= 0)")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit {args.limit} is not valid; give a number of documents (>= 1)")
    if args.batch_size < 1:
        raise UserError(f"--batch-size {args.batch_size} is not valid; give a number of sequences (>= 1)")
    import_extra("lm_eval", "eval", "blocklab eval")
    import_extra("transformers", "eval", "blocklab eval")
    from blocklab.hf.eval_store import table_rows
    from blocklab.hf.evaluation import evaluate

    record = evaluate(args.run, args.tasks, args.step, args.limit, args.batch_size, args.device, log=status)
    how = "stored earlier with the same settings" if record["reused"] else "written"
    status(f"results of step {record['step']}: {record['path']} ({how})")
    print_lines(table(table_rows(record)))
    return 0


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """The rows under a header, each column as wide as its widest cell; numbers right-aligned."""
    rows = [("task", "metric", "value", "stderr", "documents"), *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows
    ]
