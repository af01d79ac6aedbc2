"""`blocklab export`: a run's checkpoint as a folder `transformers` loads (weights in safetensors, the
whole ModelConfig in config.json, the run's BPE as a fast tokenizer, the modules for
`trust_remote_code`, a model card). Written beside the target and renamed into place, so a failed
export never leaves half a folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tokenizers import Tokenizer, processors
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

import blocklab
from blocklab.atomic import writable_dir
from blocklab.errors import UserError
from blocklab.hf.modeling import HF_CLASSES
from blocklab.tokens import EOD, MASK, PAD
from blocklab.training.config import load_config
from blocklab.training.generate import load_run_step, summary_of

# Translation stays in blocklab: its decoder starts from <eod> with fairseq's shared vocabulary and is
# searched by blocklab's own beam search (blocklab translate); `transformers`' EncoderDecoderModel wants
# two separately configured models and its own cache protocol, which would be a second implementation.
EXPORTABLE = tuple(HF_CLASSES)


def hf_tokenizer(tok: Tokenizer, task: str, max_len: int) -> PreTrainedTokenizerFast:
    """The run's byte-level BPE as a `transformers` fast tokenizer that encodes text as the run's data did.

    clm: text in, the same ids out, whatever the text holds (a literal "<eod>" in code stays bytes, as
    blocklab encodes it). mlm: "<mask>" in the text is the mask token (fill-mask needs it).
    classification: `<eod> text [<eod> pair]`, the input a fine-tuning run saw (data/labelled_batches.py)."""
    tok = Tokenizer.from_str(tok.to_str())
    if task == "classification":
        tok.post_processor = processors.TemplateProcessing(
            single=f"{EOD} $A", pair=f"{EOD} $A {EOD} $B", special_tokens=[(EOD, tok.token_to_id(EOD))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        mask_token=MASK,
        eos_token=EOD,
        bos_token=EOD,
        model_max_length=max_len,
        clean_up_tokenization_spaces=False,  # the exact text back: byte-level BPE needs no clean-up
        split_special_tokens=task == "clm",
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    tokenizer.save_pretrained(folder)
    # transformers 5 names its fast class TokenizersBackend, which 4.x does not know; both load this name.
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(settings, indent=2) + "\n")


def export_run(run: str | Path, out: str | Path, step: int | None = None, overwrite: bool = False) -> dict:
    """Export `run` (its checkpoint of `step`, default the latest that verifies) into `out`. Returns what
    was written: {"out", "task", "step", "block", "n_params"}."""
    run, out = Path(run), Path(out)
    if not (run / "config.toml").is_file() and any(run.glob("seed-*/config.toml")):
        seeds = sorted(p.parent.name for p in run.glob("seed-*/config.toml"))
        raise UserError(f"{run} holds fine-tuning seeds; export one of them: {run}/{seeds[0]} ({', '.join(seeds)})")
    where, home = out.resolve(), run.resolve()
    if where == home or where in home.parents:
        raise UserError(f"--out {out} holds the run {run} itself; export into another folder")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"--out {out} is a file or a link, not a folder; choose another --out")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not overwrite:
        raise UserError(f"{out} exists and is not empty; pass --overwrite to replace it, or choose another --out")
    writable_dir(out.parent, "--out's folder")  # a file in the way, no permission, a full disk: before any work
    if (run / "config.toml").is_file():  # before the checkpoint is read: a translation run fails at once
        task = load_config(run / "config.toml").model.task
        if task not in EXPORTABLE:
            raise UserError(
                f"{run} is a {task} run; export takes {', '.join(EXPORTABLE)} runs (translation models stay in "
                "blocklab: blocklab translate)"
            )
    model, tokenizer, cfg, ckpt_step = load_run_step(run, "cpu", step)
    task = cfg.model.task
    hf_logging.disable_progress_bar()  # one file of a small model: the command says when it is done
    hf = HF_CLASSES[task].from_blocklab(model.eval())
    tmp = out.parent / f".{out.name}.export-{os.getpid()}"  # beside the target, as write_atomic's files
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        hf.save_pretrained(tmp)
        save_tokenizer(hf_tokenizer(tokenizer, task, cfg.model.max_seq_len), tmp)
        info = {
            "task": task,
            "step": ckpt_step,
            "block": cfg.model.block,
            "n_params": sum(p.numel() for p in model.parameters()),
            "run": str(run.resolve()),
            "blocklab_version": blocklab.__version__,
        }
        (tmp / "blocklab_export.json").write_text(json.dumps(info, indent=2) + "\n")
        (tmp / "README.md").write_text(model_card(info, summary_of(run)))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dict(info, out=str(out))


AUTO = {
    "clm": "AutoModelForCausalLM",
    "mlm": "AutoModelForMaskedLM",
    "classification": "AutoModelForSequenceClassification",
}


def model_card(info: dict, summary: dict) -> str:
    auto = AUTO[info["task"]]
    loss = summary.get("final_eval_loss", summary.get("final_score"))
    lines = [
        "---",
        "library_name: transformers",
        "tags: [blocklab]",
        "---",
        f"# blocklab {info['block']} ({info['task']})",
        "",
        f"Exported by `blocklab export` from the run `{info['run']}` at step {info['step']}: "
        f"{info['n_params']:,} parameters, block `{info['block']}`"
        + (f", final score {loss:.4f}" if isinstance(loss, (int, float)) else "")
        + ".",
        "",
        "**Requires blocklab** (its modules are the model's code): `pip install 'blocklab[hf]'`"
        f" (exported with blocklab {info['blocklab_version']}); `transformers` 4.57 to 5.x.",
        "",
        "```python",
        f"from transformers import AutoTokenizer, {auto}",
        f'model = {auto}.from_pretrained("PATH", trust_remote_code=True)  # or: import blocklab.hf first',
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        "```",
        "",
        "The whole blocklab ModelConfig is in config.json under `blocklab`.",
        "",
    ]
    return "\n".join(lines)
