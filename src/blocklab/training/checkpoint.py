"""Atomic checkpoints: tensors in safetensors, the rest in JSON, verified by sha256 on load.

Each checkpoint is written into a temporary folder, synced, renamed to `step-N`, and only
then does the `latest` pointer move (itself replaced atomically). A kill at any moment
leaves `latest` naming a complete checkpoint. What a kill cannot do, a full disk or a copy cut short
can: readers asked to `fallback` then use the newest checkpoint that verifies and say which one was
damaged. Two formats share that folder discipline and the
manifest: whole checkpoints (model.safetensors, optimizer.safetensors) written by one process,
and the sharded checkpoints of FSDP runs (a torch.distributed.checkpoint folder, training/sharded.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from blocklab.atomic import write_atomic
from blocklab.errors import UserError

LATEST = "latest"
DCP_DIR = "dcp"  # a sharded checkpoint's torch.distributed.checkpoint folder


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


def numerics() -> dict:
    """What decides the bits of a CPU run besides the seed (benchmarks/determinism.py measured it): a
    resume on another torch build, CPU type, thread count or MKL branch may differ in the last digits."""
    return {
        "torch": torch.__version__,
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "mkl_cbwr": os.environ.get("MKL_CBWR"),
    }


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {"python": random.getstate()[1], "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]]}
    if torch.cuda.is_initialized():
        state["cuda_device"] = torch.cuda.current_device()  # whose generator this process draws from
    return state


def rng_tensors() -> dict[str, torch.Tensor]:
    """The torch generators' states: the CPU one and, once CUDA is in use, each CUDA device's (a GPU run's
    dropout draws from those). A CPU run saves no CUDA state: initialising CUDA only to save it is waste."""
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{i}"] = state
    return out


def save_checkpoint(
    root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, extra: dict, keep: int = 2
) -> Path:
    """A whole (unsharded) checkpoint, written by one process (training/sharded.py writes FSDP runs')."""
    tmp = begin(root, step)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
    opt = optimizer.state_dict()
    tensors, scalars = _optimizer_tensors(opt)
    tensors.update(rng_tensors())
    save_file(tensors, tmp / "optimizer.safetensors")
    meta = {
        "step": step,
        "param_groups": opt["param_groups"],
        "optimizer_scalars": scalars,
        "rng": rng_state(),
        "numerics": numerics(),
        "extra": extra,
    }
    (tmp / "state.json").write_text(json.dumps(meta))
    return finish(root, tmp, step, keep)


def begin(root: Path, step: int, pid: int | None = None) -> Path:
    """A fresh temporary folder for the checkpoint of `step` (named after the writing process: `pid`)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-step-{step:08d}-{pid or os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def digests(folder: Path, names) -> dict[str, str]:
    """{name: sha256} of the files `names` (relative to `folder`), each synced to disk first."""
    out = {}
    for name in names:
        _fsync(folder / name)
        out[name] = _sha256(folder / name)
    return out


def finish(root: Path, tmp: Path, step: int, keep: int, known: dict[str, str] | None = None) -> Path:
    """Make the complete folder `tmp` the checkpoint of `step`: every file synced and listed with its
    sha256 in the manifest (`known`: digests other processes took of the files they wrote), the folder
    renamed, and only then the `latest` pointer moved."""
    files = dict(known or {})
    rest = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
    files.update(digests(tmp, [name for name in rest if name not in files]))
    (tmp / "manifest.json").write_text(json.dumps(dict(sorted(files.items()))))
    _fsync(tmp / "manifest.json")
    final = root / f"step-{step:08d}"
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    write_atomic(root / LATEST, final.name)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    """Drop all but the `keep` newest checkpoints (0: keep every one) and temporary folders left by
    killed writers. Checkpoints after `latest` are left alone: a run resumed from an older checkpoint
    (the newer one was damaged) writes them again, and until then they must not push out good ones."""
    latest = (root / LATEST).read_text().strip()
    done = sorted(p for p in root.glob("step-*") if p.is_dir() and p.name <= latest)
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


class DamagedCheckpoint(UserError):
    """A checkpoint (or the `latest` pointer) that cannot be read or does not verify; `reason` says why."""

    def __init__(self, what: Path, reason: str):
        super().__init__(f"{'checkpoint ' if what.name != LATEST else ''}{what} is {reason}")
        self.what, self.reason = what, reason


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def open_checkpoint(
    root: Path, step: int | None = None, share: tuple[int, int] = (0, 1), fallback: bool = False, warn=stderr_line
) -> dict:
    """The latest checkpoint (or that of `step`), verified against its manifest, without its weights:
    {'step', 'path', 'format' ('safetensors' or 'dcp'), 'extra', 'rng', 'torch_rng', 'cuda_rng', 'meta'};
    UserError if missing or damaged. `fallback` (and no `step`): a damaged `latest` pointer or checkpoint
    gives the newest earlier checkpoint that verifies, said in one line on `warn`. `share` (i, n): verify
    only every n-th file from the i-th (n processes verify a sharded checkpoint together, sharded.py)."""
    if step is not None:
        return open_at(root, step, share)
    if fallback:
        return newest(root, lambda path: open_folder(path, share), warn)
    return open_folder(_pointed(root), share)


def open_at(root: Path, step: int, share: tuple[int, int] = (0, 1)) -> dict:
    """The checkpoint of `step`, verified; a step without one names the steps there are."""
    path = root / f"step-{step:08d}"
    if not path.is_dir():
        have = ", ".join(map(str, checkpoint_steps(root))) or "none"
        raise UserError(f"{root} has no checkpoint of step {step}; it has: {have}")
    return open_folder(path, share)


def _pointed(root: Path) -> Path:
    """The checkpoint folder `latest` names (DamagedCheckpoint for an empty, cut or dangling pointer)."""
    pointer = root / LATEST
    if not pointer.is_file():
        raise UserError(f"no checkpoint in {root}: the run has saved none yet")
    try:
        name = pointer.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise DamagedCheckpoint(pointer, f"unreadable ({e})") from None
    if not name:
        raise DamagedCheckpoint(pointer, "empty")
    if not name.startswith("step-") or "/" in name or not (root / name).is_dir():
        raise DamagedCheckpoint(pointer, f"damaged: it names {name!r}, which is no checkpoint folder")
    return root / name


def newest(root: Path, open_one, warn=stderr_line) -> dict:
    """open_one(folder) of the checkpoint `latest` names or, when that pointer or checkpoint is damaged (a
    full disk, a copy cut short), of the newest other one that opens, said in one line on `warn`. One
    line naming each damaged one when none opens. `open_one` raises DamagedCheckpoint for a bad one."""
    damaged: list[DamagedCheckpoint] = []
    try:
        first = _pointed(root)
    except DamagedCheckpoint as e:
        first, damaged = None, [e]
    except UserError:
        first = None  # no pointer: a kill between a first checkpoint's rename and its pointer leaves that
    others = sorted((p for p in root.glob("step-*") if p.is_dir() and p != first), key=lambda p: p.name, reverse=True)
    for path in ([first] if first else []) + others:
        try:
            ckpt = open_one(path)
        except DamagedCheckpoint as e:
            damaged.append(e)
            continue
        if damaged:
            warn(f"warning: {damaged[0]}; using the checkpoint of step {ckpt['step']} ({path}) instead")
        return ckpt
    if not damaged:
        raise UserError(f"no checkpoint in {root}: the run has saved none yet")
    what = "; ".join(f"{e.what.name} is {e.reason}" for e in damaged)
    raise UserError(f"no checkpoint in {root} can be used: {what}")


def open_folder(ckpt: Path, share: tuple[int, int] = (0, 1)) -> dict:
    """The checkpoint in the folder `ckpt`, verified (DamagedCheckpoint otherwise): open_checkpoint's fields."""
    with _readable(ckpt):
        if not (ckpt / "manifest.json").is_file():
            raise DamagedCheckpoint(ckpt, "incomplete: it has no manifest.json")
        manifest = json.loads((ckpt / "manifest.json").read_text())
        for name, digest in sorted(manifest.items())[share[0] :: share[1]]:
            if _sha256(ckpt / name) != digest:
                raise DamagedCheckpoint(ckpt, f"corrupted: {name} does not match its checksum")
        meta = json.loads((ckpt / "state.json").read_text())
        fmt = meta.get("format", "safetensors")
        with safe_open(ckpt / ("optimizer.safetensors" if fmt == "safetensors" else "rng.safetensors"), "pt") as f:
            rng = f.get_tensor("rng.torch")  # these tensors only, not the optimizer's state
            cuda = {int(k[9:]): f.get_tensor(k) for k in f.keys() if k.startswith("rng.cuda.")}
    return {
        "step": meta["step"],
        "path": ckpt,
        "format": fmt,
        "extra": meta["extra"],
        "rng": meta["rng"],
        "torch_rng": rng,
        "cuda_rng": cuda,  # empty for a CPU run's checkpoint and for those written before CUDA's was saved
        "meta": meta,
    }


@contextlib.contextmanager
def _readable(ckpt: Path):
    """Reading a checkpoint's files: what the disk or the formats raise becomes one clear line."""
    try:
        yield
    except UserError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError, CheckpointException) as e:
        raise DamagedCheckpoint(ckpt, f"unreadable or truncated: {type(e).__name__}: {e}") from None


def load_checkpoint(root: Path, step: int | None = None, fallback: bool = False, warn=stderr_line) -> dict:
    """open_checkpoint's fields and the whole model state ('model'), in one process whatever wrote it;
    also the optimizer's ('optimizer') for the whole format. Sharded (DCP) checkpoints are restored into
    a training run by training/sharded.py instead. `fallback`: as open_checkpoint's, and a checkpoint
    whose weights cannot be read counts as damaged too."""
    if step is not None or not fallback:
        return read_weights(open_checkpoint(root, step))
    return newest(root, lambda path: read_weights(open_folder(path)), warn)


def read_weights(ckpt: dict) -> dict:
    """An opened checkpoint (open_checkpoint) with its weights: load_checkpoint's fields."""
    path, meta = ckpt["path"], ckpt["meta"]
    with _readable(path):
        if ckpt["format"] == "dcp":
            return {**ckpt, "model": _dcp_model_state(path, meta.get("scalar_params", []))}
        model_state = load_file(path / "model.safetensors")
        tensors = load_file(path / "optimizer.safetensors")
    state: dict = {}
    for key, value in tensors.items():
        if key.startswith("state."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for key, value in meta["optimizer_scalars"].items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {**ckpt, "model": model_state, "optimizer": {"state": state, "param_groups": meta["param_groups"]}}


def _dcp_model_state(path: Path, scalars: list[str]) -> dict:
    """A sharded checkpoint's model as one state dict, read by this process alone: the shapes and
    dtypes come from the checkpoint's metadata, so no model (and no process group) is needed. The
    `scalars`, stored as 1-element vectors (FSDP shards no 0-dim tensor), get their shape back."""
    reader = dcp.FileSystemReader(path / DCP_DIR)
    state = {
        key[len("model.") :]: torch.empty(m.size, dtype=m.properties.dtype)
        for key, m in reader.read_metadata().state_dict_metadata.items()
        if key.startswith("model.") and isinstance(m, TensorStorageMetadata)
    }
    with single_process():
        dcp.load({"model": state}, storage_reader=reader, no_dist=True)
    return {k: v.reshape(()) if k in scalars else v for k, v in state.items()}


@contextlib.contextmanager
def single_process(alone: bool = True):
    """DCP without a process group (`alone`): deliberate here, so not worth its warning on every call."""
    with warnings.catch_warnings():
        if alone:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def restore_rng(ckpt: dict) -> None:
    torch.set_rng_state(ckpt["torch_rng"])
    cuda = ckpt.get("cuda_rng") or {}
    saved = ckpt["rng"].get("cuda_device", 0)
    if saved in cuda and torch.cuda.is_initialized():
        # Each process draws on its own device only, so that device gets the saved device's state (the
        # processes of a DDP run restore rank 0's, as they do the CPU generator's; they draw alike).
        torch.cuda.set_rng_state(cuda[saved], torch.cuda.current_device())
    py = ckpt["rng"]["python"]
    random.setstate((3, tuple(py), None))
    n = ckpt["rng"]["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
