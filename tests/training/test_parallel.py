"""training/parallel.py: micro-batches, gradient sync, the one-process wrap and the scalar gains as fully_shard
needs them."""

import contextlib

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from blocklab import build_model
from blocklab.training.distributed import Dist
from blocklab.training.parallel import (
    gradient_sync,
    is_sharded,
    micro_batches,
    scalars_as_vectors,
    wrap,
)
from tests.helpers import small_cfg

V = 97


# --- micro_batches ---------------------------------------------------------------------------------


def test_micro_batches_are_equal_consecutive_row_chunks_of_every_tensor():
    ids = torch.arange(8 * 5).reshape(8, 5)
    labels = -torch.arange(8 * 5).reshape(8, 5)
    mask = torch.arange(8) % 3
    for k in (2, 4, 8):
        parts = micro_batches((ids, labels, mask), k)
        assert len(parts) == k
        for i, part in enumerate(parts):
            assert isinstance(part, tuple) and len(part) == 3
            rows = slice(i * 8 // k, (i + 1) * 8 // k)
            assert torch.equal(part[0], ids[rows]) and torch.equal(part[1], labels[rows])
            assert torch.equal(part[2], mask[rows])
        for j, whole in enumerate((ids, labels, mask)):  # in order: their concatenation is the batch
            assert torch.equal(torch.cat([p[j] for p in parts]), whole)


def test_one_micro_batch_is_the_batch_itself():
    batch = (torch.zeros(6, 3), torch.ones(6, 3))
    parts = micro_batches(batch, 1)
    assert len(parts) == 1 and parts[0] is batch


@pytest.mark.parametrize("rows,k", [(6, 4), (5, 2), (3, 6)])
def test_rows_that_do_not_split_are_refused(rows, k):
    with pytest.raises(ValueError, match=f"{rows} rows do not split into {k}"):
        micro_batches((torch.zeros(rows, 2), torch.zeros(rows, 2)), k)


# --- gradient_sync, wrap ------------------------------------------------------------------------


def _clm_loss(model, seed):
    torch.manual_seed(seed)
    ids = torch.randint(0, V, (3, 20), generator=torch.Generator().manual_seed(1))
    return model(ids, labels=ids).loss


@pytest.mark.parametrize("sync", [False, True])
def test_gradient_sync_is_a_null_context_for_a_plain_module(sync):
    m = build_model(small_cfg("pre-ln", "clm"))
    ctx = gradient_sync(m, sync)
    assert isinstance(ctx, contextlib.nullcontext)
    with ctx:
        _clm_loss(m, 0).backward()
    assert all(p.grad is not None for p in m.parameters())


@pytest.mark.parametrize("sync", [False, True])
def test_gradient_sync_tells_an_fsdp_module_whether_to_reduce(sync):
    class FakeFSDP(nn.Module):  # what gradient_sync sees of an FSDPModule
        def __init__(self):
            super().__init__()
            self.calls = []

        def set_requires_gradient_sync(self, value):
            self.calls.append(value)

    m = FakeFSDP()
    with gradient_sync(m, sync):
        pass
    assert m.calls == [sync]


def test_gradient_sync_skips_ddp_reduction_except_on_the_last_micro_batch(tmp_path):
    """A one-process gloo group is enough to build DDP's wrapper and look at its sync flag."""
    if dist.is_initialized():  # another test's group: not ours to replace
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 2))
        with gradient_sync(ddp, sync=False):
            assert ddp.require_backward_grad_sync is False
        assert ddp.require_backward_grad_sync is True
        with gradient_sync(ddp, sync=True):
            assert ddp.require_backward_grad_sync is True
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_wrap_in_one_process_is_the_model_itself(parallel):
    m = build_model(small_cfg("pre-ln", "clm"))
    params = [p for p in m.parameters()]
    assert not Dist().enabled
    assert wrap(m, Dist(), parallel, "bf16") is m
    assert not is_sharded(m) and all(a is b for a, b in zip(m.parameters(), params))


# --- scalars_as_vectors --------------------------------------------------------------------------


class ScalarGain(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.5))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.a * self.lin(x)


def test_fully_shard_needs_the_scalar_gains_as_vectors(tmp_path):
    """The constraint scalars_as_vectors exists for: fully_shard raises on a 0-dim parameter. When a torch
    release lifts it, this test fails and the reshape (and the checkpoints' scalar_params) can go."""
    if dist.is_initialized():  # another test's group: not ours to replace
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="fully_shard doesn't support scalar parameters"):
            fully_shard(ScalarGain())
        m = ScalarGain()
        a = m.a
        assert scalars_as_vectors(m) == ["a"] and m.a is a and m.a.shape == (1,)
        fully_shard(m)
        m(torch.ones(2, 4)).sum().backward()
        assert is_sharded(m) and m.a.grad.shape == (1,)
    finally:
        dist.destroy_process_group()
