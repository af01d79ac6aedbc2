"""`blocklab export`: a run's checkpoint as a folder `transformers` loads (weights in safetensors, the
whole ModelConfig in config.json, the run's BPE as transformers' own fast tokenizer, the model's code for
`trust_remote_code` generated from the package (remote.py), a model card). Written beside the target and
renamed into place, so a failed export never leaves half a folder.

`--overwrite` replaces an earlier export only: a folder whose marker (blocklab_export.json) lists every
file in it, or an empty folder. Anything else in --out (a run, a notes file, a file added to an export) is
refused in one line naming what is there, and nothing is deleted.
"""

from __future__ import annotations

import hashlib
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
from blocklab.hf import remote
from blocklab.hf.card import model_card
from blocklab.hf.modeling import HF_CLASSES
from blocklab.run_summary import read_summary
from blocklab.tokens import EOD, MASK, PAD
from blocklab.training.config import load_config
from blocklab.training.generate import load_run

# Translation stays in blocklab: its decoder starts from <eod> with fairseq's shared vocabulary and is
# searched by blocklab's own beam search (blocklab translate); `transformers`' EncoderDecoderModel wants
# two separately configured models and its own cache protocol, which would be a second implementation.
EXPORTABLE = tuple(HF_CLASSES)
MARKER = "blocklab_export.json"
# The files of an export made before the marker listed them (its own name and the generated modules aside).
EARLIER_FILES = {
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "configuration_blocklab.py",
    "modeling_blocklab.py",
}


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
        model_input_names=["input_ids", "attention_mask"],  # blocklab's models take no token_type_ids
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    tokenizer.save_pretrained(folder)
    # transformers 5 names its fast class TokenizersBackend, which 4.x does not know; both load this name, and
    # it is transformers' own class: loading the tokenizer runs none of the folder's code.
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(settings, indent=2) + "\n")


def code_digest() -> str:
    """sha256 of the model code an export carries (remote.py): an export made by other code is another export."""
    h = hashlib.sha256()
    for name, text in sorted(remote.sources().items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def check_out(out: Path, run: Path, overwrite: bool) -> None:
    """UserError (one line) unless `out` may receive the export: absent, empty, or (with overwrite) an earlier
    export holding nothing else. Never the run itself or a folder holding it."""
    where, home = out.resolve(), run.resolve()
    if where == home or where in home.parents:
        raise UserError(f"--out {out} holds the run {run} itself; export into another folder")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"--out {out} is a file or a link, not a folder; choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return
    foreign = not_exported(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        what = "a blocklab run (config.toml), " if (out / "config.toml").is_file() else ""
        raise UserError(
            f"--out {out} holds {what}{shown}, which no blocklab export wrote; --overwrite replaces only an earlier "
            "export or an empty folder: choose another --out"
        )
    if not overwrite:
        raise UserError(f"{out} holds an earlier export; pass --overwrite to replace it, or choose another --out")


def not_exported(folder: Path) -> list[str]:
    """The entries of `folder` that its export marker does not list (every entry when there is no marker)."""
    names = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in folder.iterdir())
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return names
    if not isinstance(marker, dict):
        return names
    listed = marker.get("files")
    if not isinstance(listed, list):  # an export from before the marker listed its files
        listed = EARLIER_FILES | {n for n in names if n.startswith("blocklab_") and n.endswith(".py")}
    # __pycache__/: Python's compiled copies of the folder's own modules, where something imported them in place
    return [n for n in names if n not in set(listed) | {MARKER, "__pycache__/"}]


def export_run(run: str | Path, out: str | Path, step: int | None = None, overwrite: bool = False) -> dict:
    """Export `run` (its checkpoint of `step`, default the latest that verifies) into `out`. Returns what
    was written: {"out", "task", "step", "block", "n_params"}."""
    run, out = Path(run), Path(out)
    if not (run / "config.toml").is_file() and any(run.glob("seed-*/config.toml")):
        seeds = sorted(p.parent.name for p in run.glob("seed-*/config.toml"))
        raise UserError(f"{run} holds fine-tuning seeds; export one of them: {run}/{seeds[0]} ({', '.join(seeds)})")
    check_out(out, run, overwrite)
    writable_dir(out.parent, "--out's folder")  # a file in the way, no permission, a full disk: before any work
    if (run / "config.toml").is_file():  # before the checkpoint is read: a translation run fails at once
        task = load_config(run / "config.toml").model.task
        if task not in EXPORTABLE:
            raise UserError(
                f"{run} is a {task} run; export takes {', '.join(EXPORTABLE)} runs (translation models stay in "
                "blocklab: blocklab translate)"
            )
    model, tokenizer, cfg, ckpt_step = load_run(run, step)
    task, summary = cfg.model.task, read_summary(run)
    hf_logging.disable_progress_bar()  # one file of a small model: the command says when it is done
    hf = HF_CLASSES[task].from_blocklab(model.eval())
    names = summary.label_names if summary else None
    if task == "classification" and isinstance(names, list) and len(names) == cfg.model.n_labels:
        hf.config.id2label = dict(enumerate(map(str, names)))  # the fine-tuning data's own labels
        hf.config.label2id = {name: i for i, name in hf.config.id2label.items()}
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
            "run": run.resolve().name,  # the folder's name: the export may be published, a local path not
            "blocklab_version": blocklab.__version__,
            "code": code_digest(),
        }
        (tmp / "README.md").write_text(model_card(info, cfg, summary, hf.config))
        info["files"] = sorted(p.name for p in tmp.iterdir()) + [MARKER]
        (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
        if out.exists():
            check_out(out, run, overwrite)  # again, just before the swap: nothing else may have arrived meanwhile
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dict(info, out=str(out))
