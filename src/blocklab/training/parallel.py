"""Scale-out on PyTorch's own engine (docs/models.md#scaling-out): DDP or FSDP2 under torchrun (FSDP's blocks built one
at a time as they are sharded: training/materialise.py) and the gradient sync that gradient accumulation skips
(train.fsdp_grad_sync). Per-block activation checkpointing is the model's own (model/checkpointing.py).

Order of application (torchtitan's): activation checkpointing, then the regional compile of each
block, then the data-parallel wrapper, then the optimizer (FSDP replaces the parameters by sharded
DTensors, which the optimizer must hold).
"""

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method

from blocklab.training import materialise
from blocklab.training.distributed import Dist

# The FSDP models that reduce-scatter their gradients after every micro-batch (train.fsdp_grad_sync="every").
SYNC_EVERY: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def mixed_precision(precision: str) -> MixedPrecisionPolicy:
    """A block's policy: bf16 runs compute from bf16 copies of the sharded fp32 weights (gains included,
    which one process's autocast keeps in fp32) and reduce the gradients in fp32 (the optimizer's state
    and update stay fp32); otherwise FSDP keeps the parameters' dtype."""
    # The block's input is left as it comes (fp32: the residual stream, as under one process's autocast)
    # where FSDP would cast it to bf16; autocast makes the matmuls bf16.
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    return MixedPrecisionPolicy()


def shard(model: nn.Module, precision: str, grad_sync: str = "last") -> nn.Module:
    """FSDP2 in place: one unit per encoder block, and the root (embeddings, head, final norm). A block that
    training/materialise.py's `build` left on the meta device is built (on the CPU) just before it is sharded, so
    that one block at a time is whole. `grad_sync`: train.fsdp_grad_sync (`gradient_sync`).

    A translation model's decoder blocks belong to the root's unit: decoding reads their cross-attention
    keys and values and runs them step by step outside their `forward`, where a block of its own would
    still be sharded. `generate` is registered as a forward method so that the root unshards for it
    (the BLEU evaluation decodes during training).
    """
    for block in model.blocks:
        materialise.realise(model, block)
        fully_shard(block, mp_policy=mixed_precision(precision))
    fully_shard(model)  # the embeddings stay fp32, so the residual stream is fp32 as under autocast
    if hasattr(model, "generate"):
        register_fsdp_forward_method(model, "generate")
    if grad_sync == "every":
        SYNC_EVERY.add(model)
    return model


def scalars_as_vectors(model: nn.Module) -> list[str]:
    """The scalar gains (beta_SA, beta_FF, DyT's alpha, ...) as 1-element vectors, in place, for
    `torch.distributed.fsdp.fully_shard`: it shards every parameter along dim 0 and raises on a 0-dim one
    ("fully_shard doesn't support scalar parameters. Change ... to a 1D tensor with numel equal to 1";
    torch 2.13, tests/training/test_parallel.py checks it still does). The same Parameter, so the block's
    arithmetic broadcasts as before. Returns their names, so that a sharded checkpoint can give them back
    their shape when one process reads the model (checkpoint.load_checkpoint)."""
    names = [name for name, p in model.named_parameters() if p.dim() == 0]
    for name in names:
        p = model.get_parameter(name)
        p.data = p.data.reshape(1)
    return names


def wrap(model: nn.Module, dist: Dist, parallel: str, precision: str, grad_sync: str = "last") -> nn.Module:
    """What the training step calls: the model itself in one process, DDP's wrapper, or (FSDP, in
    place) the sharded model."""
    if not dist.enabled:
        return model
    if parallel == "fsdp":
        return shard(model, precision, grad_sync)
    ids = [dist.device.index] if dist.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def is_sharded(model: nn.Module) -> bool:
    return any(isinstance(p, torch.distributed.tensor.DTensor) for p in model.parameters())


def gradient_sync(forward: nn.Module, sync: bool):
    """A context for one micro-batch's backward: the gradients are reduced across the processes only
    when `sync` (the last micro-batch); before it each process accumulates its own, whole (DDP, and FSDP
    with train.fsdp_grad_sync="last"). FSDP with "every" reduce-scatters every micro-batch's gradients and
    accumulates its shard of them."""
    if isinstance(forward, nn.parallel.DistributedDataParallel) and not sync:
        return forward.no_sync()
    if hasattr(forward, "set_requires_gradient_sync"):  # an FSDPModule
        forward.set_requires_gradient_sync(sync or forward in SYNC_EVERY)
    return contextlib.nullcontext()


def pieces(batch, rows: int) -> list[tuple]:
    """A batch (a tuple of tensors, rows first) in consecutive pieces of `rows` rows (the last may be
    smaller), in order; views, not copies."""
    return list(zip(*(x.split(rows) for x in batch)))


def micro_batches(batch, k: int) -> list:
    """A batch as k pieces of equal rows, in order."""
    if k == 1:
        return [batch]
    if len(batch[0]) % k:
        raise ValueError(f"{len(batch[0])} rows do not split into {k} micro-batches")
    return pieces(batch, len(batch[0]) // k)
