"""training/parallel.py: micro-batches, per-block activation checkpointing, the block list, gradient
sync, the one-process wrap and the scalar gains as fully_shard needs them."""

import contextlib
import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from blocklab import build_model
from blocklab.training.distributed import Dist
from blocklab.training.parallel import (
    all_blocks,
    checkpoint_activations,
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


# --- activation checkpointing ----------------------------------------------------------------------


def _clm_loss(model, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (3, 20), generator=g)
    return model(ids, labels=ids).loss


def _translation_loss(model, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(1)
    src, tgt, labels = (torch.randint(3, V, (3, n), generator=g) for n in (11, 9, 9))
    return model(src, decoder_input_ids=tgt, labels=labels).loss


CASES = {
    "clm": (lambda: build_model(small_cfg("pre-ln", "clm", dropout=0.2)), _clm_loss),
    "translation": (
        lambda: build_model(small_cfg("pre-ln", "translation", dropout=0.2, max_seq_len=32, n_decoder_layers=2)),
        _translation_loss,
    ),
}


def _loss_and_grads(model, loss_fn, seed=0):
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model, seed)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _count_calls(model):
    """How often a submodule of each block runs: once per forward, once more per recomputation."""
    calls = {"n": 0}
    for block in all_blocks(model):
        leaf = next(m for m in block.modules() if isinstance(m, nn.Linear))
        leaf.register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    return calls


@pytest.mark.parametrize("task", sorted(CASES))
def test_checkpointed_blocks_give_the_same_loss_and_gradients_with_dropout(task):
    build, loss_fn = CASES[task]
    plain = build().train()
    patched = copy.deepcopy(plain)  # identical weights, before patching
    keys = list(plain.state_dict())
    checkpoint_activations(patched)
    # Dropout is on: other seeds give other losses, so equal losses below mean the same masks were drawn
    # in the forward and replayed by the recomputation in the backward.
    assert _loss_and_grads(plain, loss_fn, seed=0)[0] != _loss_and_grads(plain, loss_fn, seed=5)[0]
    calls_plain, calls_patched = _count_calls(plain), _count_calls(patched)
    want_loss, want_grads = _loss_and_grads(plain, loss_fn)
    got_loss, got_grads = _loss_and_grads(patched, loss_fn)
    # The recomputation runs the same kernels on the same inputs in the same order: bit for bit on the CPU.
    assert torch.equal(got_loss, want_loss)
    assert got_grads.keys() == want_grads.keys() and len(got_grads) == len(list(plain.parameters()))
    for name in want_grads:
        assert torch.equal(got_grads[name], want_grads[name]), name
    # ... and the recomputation did happen: every block's forward ran again in the backward pass.
    n_blocks = len(all_blocks(patched))
    assert calls_plain["n"] == n_blocks and calls_patched["n"] == 2 * n_blocks
    # Parameter names (so state dicts and checkpoints) are unchanged.
    assert list(patched.state_dict()) == keys
    patched.load_state_dict(plain.state_dict())


def test_checkpointed_model_in_eval_mode_and_without_grad_still_runs():
    """Evaluation (no_grad) and generation go through the patched forward too."""
    build, loss_fn = CASES["translation"]
    plain = build().eval()
    patched = copy.deepcopy(plain)
    checkpoint_activations(patched)
    with torch.no_grad():
        assert torch.equal(loss_fn(patched, 0), loss_fn(plain, 0))
        src = torch.randint(3, V, (2, 7))
        assert torch.equal(patched.greedy(src, max_new_tokens=6), plain.greedy(src, max_new_tokens=6))


# --- all_blocks, gradient_sync, wrap ---------------------------------------------------------------


def test_all_blocks_lists_the_encoder_then_the_decoder_blocks():
    m = build_model(small_cfg("pre-ln", "translation", n_layers=3, n_decoder_layers=2))
    blocks = all_blocks(m)
    assert len(blocks) == 5
    assert all(a is b for a, b in zip(blocks, [*m.blocks, *m.decoder_blocks]))
    lm = build_model(small_cfg("pre-ln", "clm"))
    assert len(all_blocks(lm)) == 3 and all(a is b for a, b in zip(all_blocks(lm), lm.blocks))


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
