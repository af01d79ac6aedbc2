"""Sampling from a trained causal model: temperature and top-k."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from tokenizers import Tokenizer

from blocklab.data.tokenizer import load_tokenizer
from blocklab.errors import UserError
from blocklab.model import build_model
from blocklab.tokens import EOD
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.config import RunConfig, load_config


@torch.no_grad()
def sample(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    stop_id: int | None = None,
) -> torch.Tensor:
    """Append up to max_new_tokens to ids (1, T); temperature 0 is greedy."""
    model.eval()
    T = model.cfg.max_seq_len
    for _ in range(max_new_tokens):
        logits = model(ids[:, -T:]).logits[:, -1].float()
        if temperature == 0:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
        ids = torch.cat([ids, nxt], dim=1)
        if stop_id is not None and nxt.item() == stop_id:
            break
    return ids


class LoadedRun(NamedTuple):
    """A trained run, read back (`blocklab.load_run`)."""

    model: torch.nn.Module  # the blocklab model (blocklab.build_model's), its weights the checkpoint's, in eval mode
    tokenizer: Tokenizer  # the run's byte-level BPE (tokenizers.Tokenizer): .encode(text).ids, .decode(ids)
    config: RunConfig  # the run's whole config: .model (ModelConfig), .data, .train
    step: int  # the step of the checkpoint read


def load_run(run: str | Path, step: int | None = None, device: str = "cpu") -> LoadedRun:
    """A run directory's model, tokenizer and config: the checkpoint of `step`, or the latest (an older one, said
    on stderr, when the latest is damaged). A missing or damaged run is a UserError naming it."""
    run = Path(run)
    if not (run / "config.toml").is_file():
        raise UserError(f"{run} holds no blocklab run (no config.toml)")
    cfg = load_config(run / "config.toml")
    if not (run / "tokenizer.json").is_file():
        raise UserError(f"{run} has no tokenizer.json")
    try:
        tokenizer = load_tokenizer(run / "tokenizer.json")  # a literal "<eod>" in a prompt stays text, as in training
    except Exception as e:  # tokenizers raises plain Exceptions on bad files
        raise UserError(f"{run}/tokenizer.json is unreadable: {e}") from None
    ckpt = load_checkpoint(run / "checkpoints", step, fallback=True)
    model = build_model(cfg.model)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise UserError(f"checkpoint {ckpt['path']} does not fit the run's config: {str(e).splitlines()[0]}") from None
    return LoadedRun(model.to(device).eval(), tokenizer, cfg, ckpt["step"])


def generate_text(
    run,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = 50,
    seed: int = 0,
    device: str = "cpu",
    step: int | None = None,
) -> str:
    model, tokenizer, cfg, _ = load_run(run, step, device)
    if cfg.model.task != "clm":
        raise UserError(f"{run} is a {cfg.model.task} model; generation needs a causal (clm) model")
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    if not ids:
        raise UserError("the prompt is empty")
    gen = torch.Generator(device=device).manual_seed(seed)
    out = sample(
        model,
        torch.tensor([ids], device=device),
        max_new_tokens,
        temperature,
        top_k,
        gen,
        stop_id=tokenizer.token_to_id(EOD),
    )
    return tokenizer.decode(out[0].tolist(), skip_special_tokens=True)
