"""Inference from a trained run: translating sentences with a translation run (`blocklab translate`).

The command line only parses its arguments, reads and writes the text; loading the run's model and
tokenizer, tokenising, batching, decoding (greedy or beam search, model/seq2seq.py and model/beam.py)
and detokenising happen here. Sampling from a causal model is training/generate.py's `generate_text`.
"""

from __future__ import annotations

from pathlib import Path

from blocklab.errors import UserError
from blocklab.training.config import load_config
from blocklab.training.generate import load_run
from blocklab.training.translation import detokenize, translate_ids


def load_translation_run(run_dir, device: str = "cpu", step: int | None = None):
    """(model, tokenizer, config) of a translation run (its checkpoint of `step`, default the latest), the
    model in eval mode; anything else is one clear line."""
    if (Path(run_dir) / "config.toml").is_file():  # the task first: a language model's checkpoint is not read
        task = load_config(Path(run_dir) / "config.toml").model.task
        if task != "translation":
            raise UserError(
                f"{run_dir} is a {task} model, not a translation model (train one with --model.task translation)"
            )
    model, tokenizer, cfg, _ = load_run(run_dir, step, device)
    if hasattr(tokenizer, "encode_special_tokens"):  # "<eod>" typed in a sentence is text, not the token
        tokenizer.encode_special_tokens = True
    return model.eval(), tokenizer, cfg


def translate_lines(
    run,
    lines: list[str],
    beam: int = 5,
    length_penalty: float = 1.0,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    device: str = "cpu",
) -> list[str]:
    """One translation per line (an empty line gives an empty line); `run` is a run directory or the
    result of load_translation_run. `beam` 1 is greedy decoding."""
    if beam < 1 or batch_size < 1 or (max_new_tokens is not None and max_new_tokens < 1):
        raise UserError("the beam size, the batch size and max_new_tokens must be positive integers")
    model, tokenizer, cfg = run if isinstance(run, tuple) else load_translation_run(run, device)
    eod, pad, limit = model.eos_id, model.pad_id, cfg.model.max_seq_len
    todo = [i for i, line in enumerate(lines) if line.strip()]
    # A source longer than the model's positions keeps its first max_seq_len - 1 tokens and its <eod>.
    sources = [tokenizer.encode(lines[i].strip(), add_special_tokens=False).ids[: limit - 1] + [eod] for i in todo]
    ids = translate_ids(model, sources, pad, device, batch_size, beam, max_new_tokens, length_penalty)
    out = [""] * len(lines)
    for i, row in zip(todo, ids):
        out[i] = detokenize(tokenizer, eod, row)
    return out
