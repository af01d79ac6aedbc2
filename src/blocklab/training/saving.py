"""A run's checkpoints as the trainer reads and writes them: whole safetensors checkpoints written by the
first process, or sharded ones (train.parallel fsdp) written by every process; the format follows the run's
train.parallel, in one process as in several."""

from __future__ import annotations

from pathlib import Path

from blocklab.errors import UserError
from blocklab.training.checkpoint import (
    has_checkpoint,
    numerics,
    open_checkpoint,
    read_weights,
    restore_rng,
    save_checkpoint,
)
from blocklab.training.config import TrainConfig
from blocklab.training.sharded import load_sharded, open_sharded, save_sharded


def restore_latest(out: Path, t: TrainConfig, model, optimizer, dist, log) -> dict | None:
    """Load the latest checkpoint that verifies of the run in `out` into `model` and `optimizer` and restore
    the RNG state; returns {"step", "extra": the run state} or None (and a warning) where there is none yet."""
    root = out / "checkpoints"
    if not has_checkpoint(root):
        log(f"warning: {out} has no checkpoint yet; starting from step 0")
        return None
    want = "dcp" if t.parallel == "fsdp" else "safetensors"
    # A damaged latest checkpoint (a crash while it was written, a full disk) is not the end of the run: the
    # newest one that verifies is used, and the fallback says so in one line.
    ckpt = open_sharded(root, dist, fallback=True) if want == "dcp" else open_checkpoint(root, fallback=True)
    if ckpt["format"] != want:
        raise UserError(
            f"checkpoint {ckpt['path']} is {ckpt['format']} but a train.parallel={t.parallel} run reads {want} "
            "checkpoints"
        )
    try:
        if want == "dcp":
            load_sharded(ckpt["path"], model, optimizer, dist)
        else:
            ckpt = read_weights(ckpt)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        raise UserError(f"checkpoint {ckpt['path']} does not fit this model: {str(e).splitlines()[0]}") from None
    restore_rng(ckpt)
    saved, now = ckpt["meta"].get("numerics"), numerics()
    if saved and saved != now and dist.device.type == "cpu" and dist.main:
        changed = ", ".join(f"{k} {saved.get(k)!r} -> {v!r}" for k, v in now.items() if saved.get(k) != v)
        log(
            f"warning: resuming with {changed}: the losses may differ from an uninterrupted run's in the "
            "last digits (a bit-exact resume needs the same torch build, CPU type, thread count and MKL_CBWR)"
        )
    return {"step": ckpt["step"], "extra": ckpt["extra"]}


def write_checkpoint(out: Path, t: TrainConfig, step: int, model, optimizer, state: dict, dist, scalar_params) -> None:
    root = out / "checkpoints"
    if t.parallel == "fsdp":  # sharded, by every process (in one process too: one format)
        save_sharded(root, step, model, optimizer, state, t.keep_checkpoints, dist, scalar_params)
    elif dist.main:
        save_checkpoint(root, step, model, optimizer, state, t.keep_checkpoints)
