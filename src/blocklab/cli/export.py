"""blocklab export --run DIR --out HF_DIR [--step N]: the export itself is blocklab.hf.export's."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's model as a folder Hugging Face transformers loads",
        description="Write the checkpoint of a clm, mlm or fine-tuned (classification) run as a folder that "
        "transformers loads offline: AutoModel (hidden states), AutoModelForCausalLM, AutoModelForMaskedLM or "
        "AutoModelForSequenceClassification (a fine-tuned run, or an mlm run's encoder with a fresh head), after "
        "`import blocklab.hf` or with trust_remote_code=True on a machine without blocklab: the folder carries "
        "the model's code, generated from blocklab's own modules, and needs torch and transformers only. The "
        "tokenizer (the run's BPE) is transformers' PreTrainedTokenizerFast. Weights in safetensors; config.json "
        "carries the whole model config; README.md is a model card (the score with its metric and unit, the "
        "data, the training settings). Needs the hf extra: pip install 'blocklab[hf]'.",
    )
    p.add_argument("--run", required=True, help="run directory written by blocklab train or finetune (one seed)")
    p.add_argument(
        "--out",
        required=True,
        help="the folder to write: a new or empty one, or an earlier export with --overwrite (anything else there "
        "is refused, and nothing deleted)",
    )
    p.add_argument("--step", type=int, default=None, help="the checkpoint step to export (default: the latest)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export in --out (a folder whose blocklab_export.json lists every file in it)",
    )
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
