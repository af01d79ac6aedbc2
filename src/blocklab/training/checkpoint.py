"""Atomic checkpoints: tensors in safetensors, the rest in JSON, verified by sha256 on load.

Each checkpoint is written into a temporary folder, synced, renamed to `step-N`, and only
then does the `latest` pointer move (itself replaced atomically). A kill at any moment
leaves `latest` naming a complete checkpoint.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from blocklab.atomic import write_atomic
from blocklab.errors import UserError

LATEST = "latest"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _optimizer_tensors(state: dict) -> tuple[dict, dict]:
    tensors, scalars = {}, {}
    for idx, per_param in state["state"].items():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                tensors[f"state.{idx}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{key}"] = value
    return tensors, scalars


def rng_state() -> dict:
    np_state = np.random.get_state()
    return {"python": random.getstate()[1], "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]]}


def save_checkpoint(root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    extra: dict, keep: int = 2) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
    opt = optimizer.state_dict()
    tensors, scalars = _optimizer_tensors(opt)
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, tmp / "optimizer.safetensors")
    meta = {"step": step, "param_groups": opt["param_groups"], "optimizer_scalars": scalars,
            "rng": rng_state(), "extra": extra}
    (tmp / "state.json").write_text(json.dumps(meta))
    files = {}
    for name in ("model.safetensors", "optimizer.safetensors", "state.json"):
        _fsync(tmp / name)
        files[name] = _sha256(tmp / name)
    (tmp / "manifest.json").write_text(json.dumps(files))
    _fsync(tmp / "manifest.json")
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    write_atomic(root / LATEST, final.name)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    """Drop all but the `keep` newest checkpoints (0: keep every one) and temporary folders left by
    killed writers."""
    latest = (root / LATEST).read_text().strip()
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for p in done[:-keep] if keep else []:
        if p.name != latest:
            shutil.rmtree(p, ignore_errors=True)
    for p in root.glob(".tmp-*"):
        if not p.name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def has_checkpoint(root: Path) -> bool:
    return (root / LATEST).is_file()


def checkpoint_steps(root: Path) -> list[int]:
    """The steps of the complete checkpoints under root."""
    return sorted(int(p.name[5:]) for p in root.glob("step-*") if p.is_dir() and (p / "manifest.json").is_file())


def load_checkpoint(root: Path, step: int | None = None) -> dict:
    """The latest checkpoint (or that of `step`) as {'step', 'model', 'optimizer', 'extra', ...};
    UserError if missing or damaged."""
    pointer = root / LATEST
    if not pointer.is_file():
        raise UserError(f"no checkpoint to resume from in {root}")
    ckpt = root / pointer.read_text().strip()
    if step is not None:
        ckpt = root / f"step-{step:08d}"
        if not ckpt.is_dir():
            have = ", ".join(map(str, checkpoint_steps(root))) or "none"
            raise UserError(f"{root} has no checkpoint of step {step}; it has: {have}")
    try:
        manifest = json.loads((ckpt / "manifest.json").read_text())
        for name, digest in manifest.items():
            if _sha256(ckpt / name) != digest:
                raise UserError(f"checkpoint {ckpt} is corrupted: {name} does not match its checksum")
        meta = json.loads((ckpt / "state.json").read_text())
        model_state = load_file(ckpt / "model.safetensors")
        tensors = load_file(ckpt / "optimizer.safetensors")
    except UserError:
        raise
    except (OSError, ValueError, SafetensorError) as e:
        raise UserError(f"checkpoint {ckpt} is unreadable or truncated: {type(e).__name__}: {e}") from None
    state: dict = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for key, value in meta["optimizer_scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {"step": meta["step"], "model": model_state, "path": ckpt, "extra": meta["extra"],
            "optimizer": {"state": state, "param_groups": meta["param_groups"]},
            "rng": meta["rng"], "torch_rng": tensors["rng.torch"]}


def restore_rng(ckpt: dict) -> None:
    torch.set_rng_state(ckpt["torch_rng"])
    py = ckpt["rng"]["python"]
    random.setstate((3, tuple(py), None))
    n = ckpt["rng"]["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
