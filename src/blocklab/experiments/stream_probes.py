"""The residual-stream probes (probes/stream.py) of a finished run, at its initialisation and at its last
checkpoint, written to RUN/stream_probes.json; a sweep measures its final runs after the verdicts. They include
the attention sink and gate measures (probes/sink.py), so a sweep with gated attention is measured too.

The initial model is rebuilt as the trainer built it: torch's generator seeded with the run's seed just before
`build_model` (training/trainer.py), so it is the run's own step-0 model, not another draw. Both models read the
same batch: the first `PROBE_BATCH` windows of `seq_len` tokens of the run's validation split, which no run
trained on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from blocklab.atomic import write_atomic
from blocklab.errors import UserError
from blocklab.registry import REGISTRY
from blocklab.training.rundir import STREAM_PROBES

FILE = STREAM_PROBES
PROBE_BATCH = 8
MEASURES_VERSION = 2


def wants_probes(block: str, gated: bool = False) -> bool:
    """The runs measured: the residual-stream family (docs/blocks.md#the-residual-stream), Pre-LN (the reference they
    all start from and the ungated side of the gate's comparison), and any run with gated attention (`gated`)."""
    spec = REGISTRY.get(block)
    return gated or block == "pre-ln" or (spec is not None and spec.family == "stream")


def _probed(model) -> bool:
    """A final run's model config is measured (`wants_probes`), and it is a language model (clm or mlm)."""
    return model.task in ("clm", "mlm") and wants_probes(model.block, model.attn_gate is not False)


def _fingerprint(run: Path, step: int) -> str:
    """The run's settings (config.toml), the checkpoint step measured and the measures' version: a stored result
    is reused only for all three (version 2 added the attention measures)."""
    key = (run / "config.toml").read_bytes() + f"|{step}|{PROBE_BATCH}|{MEASURES_VERSION}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def probe_run(run: str | Path) -> dict:
    """Measure `run` at init and at its latest checkpoint; write and return RUN/stream_probes.json's content."""
    import torch

    from blocklab.model import build_model
    from blocklab.probes.stream import stream_measures
    from blocklab.training.generate import load_run

    run = Path(run)
    trained, _, cfg, _ = load_run(run)
    if cfg.model.task not in ("clm", "mlm"):
        raise UserError(f"{run} is a {cfg.model.task} run; the stream probes measure clm and mlm models")
    step = _checkpoint_step(run)
    key = _fingerprint(run, step)
    stored = read_probes(run)
    if stored and stored.get("fingerprint") == key:
        return stored
    ids = probe_ids(cfg.data)
    torch.manual_seed(cfg.train.seed)
    initial = build_model(cfg.model)
    result = {
        "fingerprint": key,
        "block": cfg.model.block,
        "n_layers": cfg.model.n_layers,
        "seed": cfg.train.seed,
        "step": step,
        "tokens": ids.numel(),
        "init": stream_measures(initial, ids),
        "final": stream_measures(trained, ids),
    }
    write_atomic(run / FILE, json.dumps(result, indent=1) + "\n")
    return result


def probe_ids(data):
    """The probes' batch (PROBE_BATCH, seq_len): the first windows of the validation split of `data`'s corpus."""
    import torch

    from blocklab.data import prepare

    val = prepare(data, log=lambda *a, **k: None).val
    T, n = data.seq_len, PROBE_BATCH
    if len(val) < n * T:
        raise UserError(f"the validation split holds {len(val)} tokens, fewer than {n} windows of {T}")
    return torch.as_tensor(val[: n * T].astype("int64")).view(n, T)


def _checkpoint_step(run: Path) -> int:
    from blocklab.training.checkpoint import load_checkpoint

    return int(load_checkpoint(run / "checkpoints", None, fallback=True)["step"])


def read_probes(run: str | Path) -> dict | None:
    """RUN/stream_probes.json, or None where it is missing or unreadable."""
    p = Path(run) / FILE
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def run_stream_probes(finals, out: Path, log=print) -> int:
    """Measure every final language-model run of a probed block (`wants_probes`) that has a checkpoint, where the
    sweep has a residual-stream block or gated attention at all (Pre-LN alone is not measured); returns how many."""
    probed = [spec for spec in finals if spec.config is not None and _probed(spec.config.model)]
    if all(spec.config.model.block == "pre-ln" and spec.config.model.attn_gate is False for spec in probed):
        return 0
    done = 0
    for spec in probed:
        run = Path(out) / "runs" / spec.name
        if not (run / "checkpoints").is_dir():
            continue
        try:
            probe_run(run)
        except UserError as e:
            log(f"stream probes of {spec.name} skipped: {e}")
            continue
        done += 1
    if done:
        log(f"stream probes: {done} final run(s) measured at init and after training ({FILE} in each)")
    return done
