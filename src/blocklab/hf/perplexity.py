"""blocklab's own rolling log-likelihood of whole documents: the check on what `blocklab eval` reports.

lm-eval scores a perplexity task (`loglikelihood_rolling`, wikitext's metrics) one document at a time: the
document's tokens, the first predicted from the end-of-text token, each from as much of the text before it
as the model's window holds, in disjoint chunks of one window's length; bits per byte is then the summed
negative log-likelihood over the summed UTF-8 bytes, in bits, over all documents together (not a mean of
per-document values). This module computes the same quantity from those definitions, with blocklab's own
model (the run's checkpoint, not the exported folder) in plain torch and without any of lm-eval's code, so
that agreement between the two (tests/hf/test_eval.py) checks the export, the tokenizer, the task files
and the harness's use of them all at once.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from blocklab.data.tokenizer import load_tokenizer
from blocklab.errors import UserError
from blocklab.hf.eval_tasks import validation_documents
from blocklab.tokens import EOD_ID
from blocklab.training.generate import load_run


def rolling_windows(n_tokens: int, max_len: int) -> list[tuple[int, int, int]]:
    """The model calls that predict each of `n_tokens` tokens exactly once.

    Positions are those of the sequence [<eod>] + tokens, so token i sits at position i + 1. The tokens
    are taken in consecutive chunks of `max_len`; the chunk [p, p + k) is predicted by one call on the
    `max_len` positions (fewer at the start) that end just before its last token, [end - max_len, end)
    with end = p + k, whose last k outputs predict positions p + 1 .. p + k. Returns (start, end, k)."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, not {max_len}")
    windows = []
    for p in range(0, n_tokens, max_len):
        end = min(p + max_len, n_tokens)
        windows.append((max(0, end - max_len), end, end - p))
    return windows


@torch.no_grad()
def document_loglikelihood(model, ids: list[int], max_len: int, batch_size: int = 16) -> float:
    """The natural-log likelihood of the tokens `ids` under the causal `model`, predicted through
    rolling_windows from the <eod> prefix."""
    device = next(model.parameters()).device
    seq = torch.tensor([EOD_ID, *ids], dtype=torch.long, device=device)
    by_length: dict[int, list[tuple[int, int, int]]] = {}
    for w in rolling_windows(len(ids), max_len):
        by_length.setdefault(w[1] - w[0], []).append(w)
    total = 0.0
    for length, windows in by_length.items():
        for i in range(0, len(windows), batch_size):
            chunk = windows[i : i + batch_size]
            inputs = torch.stack([seq[s:e] for s, e, _ in chunk])
            targets = torch.stack([seq[s + 1 : e + 1] for s, e, _ in chunk])
            logp = torch.log_softmax(model(inputs).logits.float(), dim=-1)
            picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).double()
            for row, (_, _, k) in zip(picked, chunk):
                total += float(row[length - k :].sum())  # only the window's last k outputs are its chunk
    return total


def safe_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:  # a perplexity past 1e308: say so rather than fail
        return math.inf


def word_count(text: str) -> int:
    """Words as wikitext's perplexity counts them: the pieces between runs of whitespace."""
    return len(re.split(r"\s+", text))


def rolling_bits_per_byte(
    run: str | Path, step: int | None = None, limit: int | None = None, device: str = "cpu", batch_size: int = 16
) -> dict:
    """Bits per byte (and byte and word perplexity) of the clm run's validation documents (the first `limit`),
    from its checkpoint of `step` (default the latest): {"bits_per_byte", "byte_perplexity",
    "word_perplexity", "loglikelihood", "documents", "tokens", "bytes", "words", "step"}."""
    model, _, cfg, ckpt_step = load_run(run, step, device)
    if cfg.model.task != "clm":
        raise UserError(f"{run} is a {cfg.model.task} run; rolling bits per byte needs a causal (clm) model")
    model.eval()
    # The tokenizer as the run's data was encoded with it: a literal "<eod>" in the text is bytes, not the
    # special id (load_tokenizer sets that; load_run's tokenizer is the file as saved).
    tokenizer = load_tokenizer(Path(run) / "tokenizer.json")
    docs = validation_documents(cfg.data)[:limit]
    ll = 0.0
    counts = {"documents": len(docs), "tokens": 0, "bytes": 0, "words": 0}
    for doc in docs:
        ids = tokenizer.encode(doc.text, add_special_tokens=False).ids
        ll += document_loglikelihood(model, ids, cfg.model.max_seq_len, batch_size)
        counts["tokens"] += len(ids)
        counts["bytes"] += len(doc.text.encode("utf-8"))
        counts["words"] += word_count(doc.text)
    return {
        "bits_per_byte": -ll / (counts["bytes"] * math.log(2)),
        "byte_perplexity": safe_exp(-ll / counts["bytes"]),
        "word_perplexity": safe_exp(-ll / counts["words"]),
        "loglikelihood": ll,
        **counts,
        "step": ckpt_step,
    }
