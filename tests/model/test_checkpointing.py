"""model/checkpointing.py: per-block activation checkpointing (the same losses and gradients, dropout
included, each block recomputed once), undone on request, and the block list it walks."""

import copy

import pytest
import torch
import torch.nn as nn

from blocklab import build_model
from blocklab.model.checkpointing import all_blocks, checkpoint_activations
from tests.helpers import small_cfg

V = 97


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


def test_enable_false_gives_every_block_its_own_forward_back_and_every_skips_blocks():
    build, loss_fn = CASES["clm"]
    model = build().train()
    calls = _count_calls(model)
    checkpoint_activations(model, every=2)  # blocks 0 and 2 of 3
    loss_fn(model, 0).backward()
    assert calls["n"] == 3 + 2
    checkpoint_activations(model, enable=False)
    assert all("forward" not in vars(b) for b in all_blocks(model))
    calls["n"] = 0
    loss_fn(model, 0).backward()
    assert calls["n"] == 3


def test_all_blocks_lists_the_encoder_then_the_decoder_blocks():
    m = build_model(small_cfg("pre-ln", "translation", n_layers=3, n_decoder_layers=2))
    blocks = all_blocks(m)
    assert len(blocks) == 5
    assert all(a is b for a, b in zip(blocks, [*m.blocks, *m.decoder_blocks]))
    lm = build_model(small_cfg("pre-ln", "clm"))
    assert len(all_blocks(lm)) == 3 and all(a is b for a, b in zip(all_blocks(lm), lm.blocks))
