"""blocklab export --run DIR --out HF_DIR [--step N]: the export itself is blocklab.hf.export's."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's model as a folder Hugging Face transformers loads",
        description="Write the checkpoint of a clm, mlm or fine-tuned (classification) run as a folder that "
        "transformers loads offline: AutoModelForCausalLM, AutoModelForMaskedLM or "
        "AutoModelForSequenceClassification (after `import blocklab.hf`, or with trust_remote_code=True), and "
        "AutoTokenizer (the run's BPE). Weights in safetensors; config.json carries the whole model config. "
        "Needs the hf extra: pip install 'blocklab[hf]'.",
    )
    p.add_argument("--run", required=True, help="run directory written by blocklab train or finetune (one seed)")
    p.add_argument(
        "--out", required=True, help="the folder to write (refused if it holds anything, unless --overwrite)"
    )
    p.add_argument("--step", type=int, default=None, help="the checkpoint step to export (default: the latest)")
    p.add_argument("--overwrite", action="store_true", help="replace what --out holds")
    p.set_defaults(func=run)


def run(args) -> int:
    from blocklab.cli import status
    from blocklab.cli.output import print_lines
    from blocklab.errors import UserError, import_extra

    if args.step is not None and args.step < 0:
        raise UserError(f"--step {args.step} is not valid; give a checkpoint's step (>= 0)")
    import_extra("transformers", "hf", "blocklab export")
    from blocklab.hf.export import export_run

    info = export_run(args.run, args.out, args.step, args.overwrite)
    status(f"exported {info['task']} model ({info['block']}, {info['n_params']:,} parameters) of step {info['step']}")
    print_lines([info["out"]])
    return 0
