"""torchrun integration: ranks, devices and the process group (gloo on CPU, NCCL on GPU); the
wrappers (DDP, FSDP) are in training/parallel.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from blocklab.errors import UserError


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    # The last tensors this process reduced, alive as long as this object. Gloo's worker thread drops a
    # finished collective's tensors after wait() has returned; dropping the last reference to a Python tensor
    # there needs the GIL, which the main thread holds while it tears the process group down and joins that
    # thread: a deadlock (seen at the end of a torchrun test, one rank hung in ~ProcessGroupGloo). Kept here,
    # they are freed by the main thread, long after the worker let go of them.
    _inflight: list = field(default_factory=list, repr=False)

    def _keep(self, t: torch.Tensor) -> None:
        self._inflight = self._inflight[-15:] + [t]

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value)
            self._keep(value)
        return value

    def maximum(self, value: torch.Tensor) -> torch.Tensor:
        """The elementwise largest of every process's tensor (on the device: nothing waits for it)."""
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
            self._keep(value)
        return value

    def max(self, value: float) -> float:
        """The largest of every process's value."""
        if not self.enabled:
            return value
        t = torch.tensor(float(value), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self._keep(t)
        return t.item()

    def close(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.barrier()  # every process is done with its collectives before any tears the group down
            dist.destroy_process_group()


def setup(device: str = "auto") -> Dist:
    """Read torchrun's environment; one process without it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        check_gpus(local, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count())
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return Dist(rank, world, local, dev)


def check_gpus(local_rank: int, local_world: int, n_gpus: int) -> None:
    """One GPU per local rank (rank i on cuda:i): more ranks than GPUs is a launch mistake, not a
    CUDA error deep in set_device."""
    if n_gpus == 0:
        raise UserError("train.device=cuda but no CUDA GPU is visible; use --train.device cpu or auto")
    if local_rank >= n_gpus:
        raise UserError(
            f"torchrun started {max(local_world, local_rank + 1)} processes on this machine but it has "
            f"{n_gpus} GPU(s); use --nproc_per_node={n_gpus}, or --train.device cpu to train on the CPU"
        )


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A batch's tensor on the device: to a GPU from pinned memory without blocking, so the copy overlaps the
    step the device is still running instead of waiting for it."""
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)
