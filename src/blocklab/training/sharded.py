"""Sharded checkpoints of `train.parallel = "fsdp"` runs, through torch.distributed.checkpoint (DCP).

Every process writes its own shards of the model and optimizer state in parallel into one DCP
folder (`dcp/`: `.metadata` and one `__{rank}_0.distcp` per process); rank 0 adds the run state and
its random state, then finishes the checkpoint as checkpoint.py finishes every checkpoint (manifest,
rename, `latest`), so a kill at any moment leaves the previous one loadable. DCP reshards on load: a
checkpoint written by 2 processes resumes on 1 or on 4, and one written by a single process (an fsdp
run without torchrun) resumes on several. One process reads the model alone for generate, translate
and finetune (checkpoint.load_checkpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from blocklab.errors import UserError
from blocklab.training.checkpoint import (
    DCP_DIR,
    DamagedCheckpoint,
    begin,
    digests,
    finish,
    newest,
    numerics,
    open_checkpoint,
    open_folder,
    rng_state,
    rng_tensors,
    single_process,
    stderr_line,
)
from blocklab.training.distributed import Dist


def save_sharded(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict,
    keep: int,
    d: Dist,
    scalars: list[str],
) -> Path:
    """Called by every process (the writes are collective); returns the checkpoint's folder. `scalars`:
    the parameters that are scalars in the model but 1-element vectors here (parallel.scalars_as_vectors)."""
    pid = [os.getpid()]
    if d.enabled:
        dist.broadcast_object_list(pid, src=0)  # one temporary folder for all, named after rank 0
    tmp = begin(root, step, pid[0]) if d.main else root / f".tmp-step-{step:08d}-{pid[0]}"
    if d.enabled:
        dist.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    with single_process(not d.enabled):
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp / DCP_DIR, no_dist=not d.enabled)
    # Each process syncs and hashes the shards it wrote (DCP names them __{rank}_{i}.distcp; finish hashes
    # any file nobody claimed), in parallel, and rank 0 lists them all in the manifest: the file list
    # comes from the writers, not from a directory listing another machine may not see complete yet.
    mine = digests(tmp, sorted(f"{DCP_DIR}/{p.name}" for p in (tmp / DCP_DIR).glob(f"__{d.rank}_*.distcp")))
    known = [mine]
    if d.enabled:
        known = [None] * d.world_size if d.main else None
        dist.gather_object(mine, known, dst=0)
    final = root / f"step-{step:08d}"
    if d.main:
        save_file(rng_tensors(), tmp / "rng.safetensors")
        meta = {
            "step": step,
            "format": "dcp",
            "world_size": d.world_size,
            "scalar_params": scalars,
            "rng": rng_state(),
            "numerics": numerics(),
            "extra": extra,
        }
        (tmp / "state.json").write_text(json.dumps(meta))
        finish(root, tmp, step, keep, {k: v for part in known for k, v in part.items()})
    if d.enabled:
        dist.barrier()  # nobody goes on (or reads `latest`) before the checkpoint is complete
    return final


def open_sharded(root: Path, d: Dist, fallback: bool = False) -> dict:
    """checkpoint.open_checkpoint with the files' verification split over the processes; a damaged
    checkpoint is the same one-line UserError on every process (none is left waiting in a collective).
    `fallback`: every candidate is judged by all processes together, so all of them take the same one."""
    share = (d.rank, d.world_size)
    if not fallback:
        return _agreed(lambda: open_checkpoint(root, share=share), d)
    say = stderr_line if d.main else (lambda line: None)
    return newest(root, lambda path: _agreed(lambda: open_folder(path, share), d), say)


def _agreed(open_one, d: Dist) -> dict:
    """open_one() on every process; where any process fails, every process raises that failure."""
    try:
        ckpt, error = open_one(), None
    except DamagedCheckpoint as e:
        ckpt, error = None, (str(e.what), e.reason)
    except UserError as e:
        ckpt, error = None, (None, str(e))
    errors = [error]
    if d.enabled:
        errors = [None] * d.world_size
        dist.all_gather_object(errors, error)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        what, reason = first
        raise UserError(reason) if what is None else DamagedCheckpoint(Path(what), reason)
    return ckpt


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, d: Dist) -> None:
    """The model and optimizer state of the DCP checkpoint at `path` into this run's model, sharded or
    not, on any number of processes (each reads the pieces of its own shards)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    try:
        with single_process(not d.enabled):
            dcp.load(state, checkpoint_id=path / DCP_DIR, no_dist=not d.enabled)
    except CheckpointException as e:  # a BaseException: the first process's first failure, as one line
        first = next(iter(e.failures.values()), e)
        raise UserError(f"checkpoint {path} does not fit this model: {str(first).splitlines()[0]}") from None
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
