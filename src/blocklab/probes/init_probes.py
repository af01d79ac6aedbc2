"""Signal propagation at initialisation over blocks x depths, averaged over seeds and batches.

`run_init_probes` builds each model from a ModelConfig, measures it with
`blocklab.probes.measure` (the public model API only), adds the papers' predictions
(`blocklab.probes.predictions`) and returns one JSON-serialisable dict, the content of
`probes.json` (its fields are documented in the README, section "probes.json").
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence

import torch

from blocklab import __version__
from blocklab.atomic import write_atomic
from blocklab.blocks import REGISTRY
from blocklab.config import ModelConfig
from blocklab.model import build_model
from blocklab.probes.measure import UPDATE_LR, aggregate, probe_batch
from blocklab.probes.predictions import LAST_FFN_SLOPE, fit_loglog, hidden_norm_prediction, last_ffn_reference

SCHEMA = "blocklab.probes/1"
ABLATION_BLOCK = "softmax-noskip"  # plain softmax attention, no skip: the rank-collapse ablation


def take_batches(batches, n: int) -> list[tuple]:
    """The first `n` batches of a callable `batches(i)`, an object with `.get(i)`, or an iterable."""
    if n < 1:
        raise ValueError(f"n_batches={n!r} is not valid; it must be a positive int")
    if hasattr(batches, "get") and callable(batches.get):
        out = [batches.get(i) for i in range(n)]
    elif callable(batches):
        out = [batches(i) for i in range(n)]
    else:
        out = []
        for b in batches:
            if len(out) == n:
                break
            out.append(b)
    if len(out) < n:
        raise ValueError(f"{n} batches were asked for but only {len(out)} were given")
    return [tuple(b) for b in out]


def random_batches(vocab_size: int, seq_len: int, batch_size: int, seed: int = 0) -> Callable[[int], tuple]:
    """Batch `i` of uniformly random tokens with next-token labels (a random-text stand-in)."""

    def get(i: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + i)
        w = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=g)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    return get


def check_blocks(blocks: Sequence[str]) -> list[str]:
    bad = [b for b in blocks if b not in REGISTRY]
    if bad or not blocks:
        raise ValueError(f"block={bad[0] if bad else ''!r} is not valid; choose among: {', '.join(REGISTRY)}")
    return list(dict.fromkeys(blocks))


def check_depths(depths: Sequence[int]) -> list[int]:
    if not depths or any(isinstance(L, bool) or not isinstance(L, int) or L < 1 for L in depths):
        raise ValueError(f"depths={list(depths)!r} is not valid; give positive ints such as 2,4,8")
    return sorted(set(depths))


def run_init_probes(
    blocks: Sequence[str],
    depths: Sequence[int],
    batches,
    *,
    model: dict | None = None,
    seeds: int | Sequence[int] = 3,
    n_batches: int = 2,
    ablation: bool = False,
    device: str | torch.device = "cpu",
    progress: bool | None = None,
    settings: dict | None = None,
    out: str | os.PathLike | None = None,
) -> dict:
    """Probe every (block, depth) at initialisation; return (and with `out`, write) probes.json.

    - `batches`: `(input_ids, labels[, attention_mask])` tuples: a callable `batches(i)`, an
      object with `.get(i)` (blocklab.data's ClmBatches / MlmBatches) or an iterable. The same
      `n_batches` batches are used for every model, so blocks are compared on the same text.
    - `model`: ModelConfig fields shared by all models (not `block` / `n_layers`);
      `max_seq_len` defaults to the batches' sequence length.
    - `seeds`: a count (seeds 0..n-1) or the list of model-init seeds; results are the
      mean and sample std over seeds x batches.
    - `ablation`: also probe `softmax-noskip` (skipless softmax attention) for rank collapse.
    - `out`: a folder; `probes.json` is written there.
    """
    blocks = check_blocks(list(blocks) + ([ABLATION_BLOCK] if ablation and ABLATION_BLOCK not in blocks else []))
    depths = check_depths(list(depths))
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    data = take_batches(batches, n_batches)
    base = dict(model or {})
    base.setdefault("max_seq_len", int(data[0][0].shape[1]))
    for field in ("block", "n_layers"):
        base.pop(field, None)
    ModelConfig(block=blocks[0], n_layers=1, **base)  # validates the shared fields once, up front

    jobs = [(b, L, s) for b in blocks for L in depths for s in seeds]
    bar = _progress(len(jobs), progress)
    samples: dict[tuple[str, int], list[dict]] = {}
    try:
        for block, L, seed in jobs:
            bar.set_description(f"{block} L={L} seed={seed}")
            cfg = ModelConfig(block=block, n_layers=L, **base)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                net = build_model(cfg).to(device)
            samples.setdefault((block, L), []).extend(probe_batch(net, *b) for b in data)
            del net
            bar.update(1)
    finally:
        bar.close()

    results = {b: {str(L): aggregate(samples[(b, L)]) for L in depths} for b in blocks}
    ref_cfg = ModelConfig(block=blocks[0], n_layers=1, **base)
    result = {
        "schema": SCHEMA,
        "settings": {
            "blocks": blocks,
            "depths": depths,
            "seeds": seeds,
            "n_batches": n_batches,
            "batch_size": int(data[0][0].shape[0]),
            "seq_len": int(data[0][0].shape[1]),
            "model": {k: v for k, v in ref_cfg.to_dict().items() if k not in ("block", "n_layers")},
            "ablation": ABLATION_BLOCK if ablation else None,
            "device": str(device),
            "torch": torch.__version__,
            "blocklab": __version__,
            **(settings or {}),
        },
        "results": results,
        "last_ffn_vs_depth": {b: _vs_depth(b, depths, results[b]) for b in blocks},
        "model_update_vs_depth": {b: _update_vs_depth(b, depths, results[b]) for b in blocks},
        "predictions": {b: _predictions(b, max(depths), base) for b in blocks},
    }
    result = sanitize(result)
    if out is not None:
        write_json(result, os.path.join(os.fspath(out), "probes.json"))
    return result


def _vs_depth(block: str, depths: list[int], per_depth: dict) -> dict:
    mean = [per_depth[str(L)]["last_ffn_grad_norm"]["mean"] for L in depths]
    std = [per_depth[str(L)]["last_ffn_grad_norm"]["std"] for L in depths]
    slope, intercept = fit_loglog(depths, mean)
    return {
        "depths": depths,
        "mean": mean,
        "std": std,
        "slope": slope,
        "intercept": intercept,
        "reference": last_ffn_reference(block, depths, mean),
    }


def _update_vs_depth(block: str, depths: list[int], per_depth: dict) -> dict:
    """DeepNet's model update (probes.measure.model_update) against depth, its log-log slope, and for a
    block whose paper bounds it a flat reference through the measurements' geometric mean."""
    mean = [per_depth[str(L)].get("model_update", {}).get("mean") for L in depths]
    std = [per_depth[str(L)].get("model_update", {}).get("std") for L in depths]
    slope, intercept = fit_loglog(depths, mean)
    source = REGISTRY[block].predictions.bounded_update_source
    logs = [math.log(m) for m in mean if m]
    reference = None
    if source and logs:
        level = math.exp(sum(logs) / len(logs))
        reference = {"slope": 0.0, "source": source, "values": [level] * len(depths)}
    return {
        "depths": depths,
        "mean": mean,
        "std": std,
        "slope": slope,
        "intercept": intercept,
        "lr": UPDATE_LR,
        "reference": reference,
    }


def _predictions(block: str, max_depth: int, base: dict) -> dict:
    cfg = ModelConfig(block=block, n_layers=max_depth, **base)
    return {
        "hidden_sq_norm": hidden_norm_prediction(cfg, max_depth),
        "last_ffn_slope": LAST_FFN_SLOPE[block][0] if block in LAST_FFN_SLOPE else None,
    }


def _progress(total: int, show: bool | None):
    from tqdm.auto import tqdm

    if show is None:
        show = sys.stderr.isatty()
    return tqdm(total=total, disable=not show, file=sys.stderr, unit="model", leave=False)


def sanitize(obj):
    """Non-finite floats become None (JSON has no NaN); tuples become lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def write_json(result: dict, path: str) -> str:
    """Write atomically (temporary file, then rename)."""
    write_atomic(path, json.dumps(result, indent=1, allow_nan=False) + "\n")
    return path


def summary_rows(result: dict) -> list[dict]:
    """One row per (block, depth): the numbers the CLI prints."""
    rows = []
    d = result["settings"]["model"]["d_model"]
    for block, per_depth in result["results"].items():
        pred = (result["predictions"].get(block) or {}).get("hidden_sq_norm")
        for key, r in per_depth.items():
            L = int(key)
            lo = hi = None
            if pred is not None:
                lo, hi = pred["lower"][L] / d, pred["upper"][L] / d
            rows.append(
                {
                    "block": block,
                    "depth": L,
                    "hidden_last_over_d": r["hidden_sq_norm"]["mean"][-1] / d,
                    "predicted_lo": lo,
                    "predicted_hi": hi,
                    "cos_last": r["cosine_similarity"]["mean"][-1],
                    "last_ffn_grad": r["last_ffn_grad_norm"]["mean"],
                    "loss": r["loss"]["mean"],
                }
            )
    return rows


def format_table(result: dict) -> str:
    """A short plain-text table: per block and depth, |x_L|^2/d (with the prediction), cosine, last-FFN gradient."""

    def f(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    lines = [
        f"{'block':<15}{'L':>4}  {'|x_L|^2/d':>10}  {'predicted':>17}  {'cos_L':>6}  {'grad fc2_L':>10}  {'loss':>6}"
    ]
    for r in summary_rows(result):
        pred = (
            "-"
            if r["predicted_lo"] is None
            else (
                f(r["predicted_lo"])
                if abs(r["predicted_lo"] - r["predicted_hi"]) < 1e-9 * max(1, abs(r["predicted_hi"]))
                else f"{f(r['predicted_lo'])}..{f(r['predicted_hi'])}"
            )
        )
        lines.append(
            f"{r['block']:<15}{r['depth']:>4}  {f(r['hidden_last_over_d']):>10}  {pred:>17}  "
            f"{f(r['cos_last'], '.3f'):>6}  {f(r['last_ffn_grad']):>10}  {f(r['loss'], '.2f'):>6}"
        )
    for block, v in result["last_ffn_vs_depth"].items():
        ref = v.get("reference")
        lines.append(
            f"{block}: last-FFN gradient log-log slope vs depth {f(v['slope'], '+.3f')}"
            + (f" (predicted {ref['slope']:+.1f}: {ref['source']})" if ref else "")
        )
    return "\n".join(lines)
