"""FSDP's build (docs/models.md#scaling-out): a token model whose blocks stay on the meta device until each is sharded,
so that no process ever holds the whole model, with the values the one-process build gives it, bit for bit.

The one-process build (`torch.manual_seed(seed); build_model(cfg)`) draws from torch's CPU generator twice: the
constructors (nn.Linear's and nn.Embedding's reset_parameters, in construction order), then init_weights over
model.modules() in order (model/base.py), then the block's hooks: `after_update` (nGPT puts its matrices back on
the sphere) and `after_init` (Admin's profiling pass, on a generator of its own). Here (`build`):

1. The model is built under model/base.py's BLOCK_BUILDER: the embeddings, norms and head (the root's FSDP unit;
   a translation model's decoder blocks belong to it, training/parallel.py) are built as usual, on the CPU; each
   block is built on the CPU too, so that the generator moves on as in the one-process build, its generator
   state recorded, then moved to the meta device. init_weights leaves the initialisation to step 2.
2. The walk: model.modules() in order, as init_weights goes. A root module is initialised in place; a block is
   built again from its recorded state (its constants and construction draws), its init draws made from the
   generator as it stands (its state recorded too) and its `after_update` run on it alone, then dropped.
3. `after_update` on the root alone, then `after_init` on the model, each block materialised (as in step 2, from
   its recorded states) just before its forward and dropped after it, keeping what the pass changed in it
   (Admin's omegas). The generator is then where the one-process build leaves it.
4. training/parallel.py's `shard` calls `realise` on each block just before `fully_shard`: the block is built once
   more in place (the same objects, which activation checkpointing and compilation wrapped meanwhile), and
   `fully_shard` keeps this process's shard and frees the rest.

A process holds at most the root and one block whole (`peak_params`). Two assumptions, which every registered
block meets (tests/training/test_fsdp_meta.py checks the weights of each): `after_update` draws nothing (checked
here) and acts on each matrix on its own, so that running it unit by unit is running it once on the model; and
`after_init` reads and changes the blocks' weights inside their forward only.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from blocklab.model.base import BLOCK_BUILDER, TokenModel, init_module


@dataclass
class Pending:
    """A block on the meta device: how to build it, and the generator's states where its draws start."""

    make: Callable[[int], nn.Module]
    index: int
    built: torch.Tensor  # where its constructor's draws start
    drawn: torch.Tensor | None = None  # where its init_weights draws start (the walk records it)
    changed: dict[str, torch.Tensor] = field(default_factory=dict)  # what after_init set in it


class MetaBuild:
    """One model's deferred blocks (by id) and the most parameter elements this process held at once."""

    def __init__(self) -> None:
        self.blocks: dict[int, Pending] = {}
        self.peak = 0
        self.model: Callable[[], TokenModel | None] = lambda: None

    def __call__(self, make: Callable[[int], nn.Module], n: int) -> nn.ModuleList:
        """TokenModel.build_blocks under BLOCK_BUILDER: each block built on the CPU (its draws), then on meta."""
        blocks = []
        for i in range(n):
            state = torch.get_rng_state()
            block = make(i)
            self.peak = max(self.peak, _numel(block))
            block = block.to("meta")
            self.blocks[id(block)] = Pending(make, i, state)
            blocks.append(block)
        return nn.ModuleList(blocks)

    def fill(self, block: nn.Module) -> torch.Tensor:
        """Build `block` (a deferred one of the model) in place, its values as the one-process build leaves them;
        the generator is left as it was. Returns its state after the block's init draws."""
        p, model = self.blocks[id(block)], self.model()
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(p.built)
            real = p.make(p.index)
            torch.set_rng_state(p.drawn)
            for m in real.modules():
                init_module(m, model.cfg)
            after = torch.get_rng_state()
        _move(real, block)
        with alone(model, block):
            after_update(model)
        for name, value in p.changed.items():
            block.get_parameter(name).copy_(value.reshape(block.get_parameter(name).shape))
        self.peak = max(self.peak, _numel(model))
        return after


BUILDS: weakref.WeakKeyDictionary[nn.Module, MetaBuild] = weakref.WeakKeyDictionary()


@torch.no_grad()
def build(build_model: Callable[[], nn.Module]) -> nn.Module:
    """build_model() (a task's: torch seeded just before) with its blocks on the meta device, every other value
    and the generator's state as the one-process build leaves them (the module docstring); `realise` builds
    each block in turn."""
    meta = MetaBuild()
    token = BLOCK_BUILDER.set(meta)
    try:
        model = build_model()
    finally:
        BLOCK_BUILDER.reset(token)
    if not isinstance(model, TokenModel):  # its init_weights (if any) left the initialisation to the walk
        raise TypeError(f"materialise.build builds token models (model/base.py), not {type(model).__name__}")
    meta.model = weakref.ref(model)
    BUILDS[model] = meta
    walk(model, meta)
    after_update(model)  # on the root: every block is on the meta device again
    with profiling(model, meta):
        model.block_hooks.after_init(model)
    return model


def walk(model: TokenModel, meta: MetaBuild) -> None:
    """init_weights' draws over model.modules() in order: a root module's in place, a block's on a copy of it."""
    inside: set[int] = set()
    for m in model.modules():
        if id(m) in inside:
            continue
        p = meta.blocks.get(id(m))
        if p is None:
            init_module(m, model.cfg)
            continue
        inside.update(id(s) for s in m.modules())
        p.drawn = torch.get_rng_state()
        torch.set_rng_state(meta.fill(m))
        _drop(m)
    meta.peak = max(meta.peak, _numel(model))


def realise(model: nn.Module, block: nn.Module) -> None:
    """`block` of `model` built in place, on the CPU, if `build` left it on the meta device (else nothing)."""
    meta = BUILDS.get(model)
    if meta is not None and id(block) in meta.blocks and _is_meta(block):
        with torch.no_grad():
            meta.fill(block)


def peak_params(model: nn.Module) -> int | None:
    """The most parameter elements this process held at once while `build` built `model` and `realise` its
    blocks (None: not built by `build`)."""
    meta = BUILDS.get(model)
    return meta.peak if meta is not None else None


def after_update(model: TokenModel) -> None:
    """The block's after_update hook, which must not draw from the generator (the walk's order is not the one-
    process build's)."""
    state = torch.get_rng_state()
    model.after_optimizer_step()
    if not torch.equal(state, torch.get_rng_state()):
        raise RuntimeError(f"block {model.cfg.block!r}: its after_update hook draws random numbers")


@contextlib.contextmanager
def alone(model: nn.Module, unit: nn.Module) -> Iterator[None]:
    """Every parameter and buffer of `model` outside `unit` on the meta device for the while, where a hook's
    arithmetic does nothing; the same tensors back afterwards."""
    inside = {id(m) for m in unit.modules()}
    saved, memo = [], {}
    for m in model.modules():
        if id(m) in inside:
            continue
        for store in (m._parameters, m._buffers):
            for key, t in store.items():
                if t is not None and not t.is_meta:
                    saved.append((store, key, t))
                    store[key] = memo.setdefault(id(t), _meta_like(t))
    try:
        yield
    finally:
        for store, key, t in saved:
            store[key] = t


@contextlib.contextmanager
def profiling(model: TokenModel, meta: MetaBuild) -> Iterator[None]:
    """Each deferred block materialised for its forward pass and dropped after it, keeping (by name) the
    parameters the pass changed in place (their version counters say so)."""
    versions: dict[int, dict[str, int]] = {}

    def before(block, args):
        meta.fill(block)
        versions[id(block)] = {name: t._version for name, t in block.named_parameters()}

    def after(block, args, out):
        p = meta.blocks[id(block)]
        for name, t in block.named_parameters():
            if t._version != versions[id(block)][name]:
                p.changed[name] = t.detach().clone()
        _drop(block)

    handles = []
    for block in model.blocks:
        if id(block) in meta.blocks:
            handles += [block.register_forward_pre_hook(before), block.register_forward_hook(after)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _move(real: nn.Module, block: nn.Module) -> None:
    """real's tensors into `block` (the same module tree), each in its place's shape (a scalar gain that
    training/parallel.py's scalars_as_vectors made a 1-element vector stays one); shared ones stay shared."""
    memo: dict[int, torch.Tensor] = {}
    for mine, theirs in zip(block.modules(), real.modules()):
        for key, t in mine._parameters.items():
            if t is not None:
                src = theirs._parameters[key].detach().reshape(t.shape)
                mine._parameters[key] = memo.setdefault(id(t), nn.Parameter(src, requires_grad=t.requires_grad))
        for key, t in mine._buffers.items():
            if t is not None:
                mine._buffers[key] = memo.setdefault(id(t), theirs._buffers[key])


def _drop(block: nn.Module) -> None:
    """`block` back on the meta device, its CPU tensors freed; shared ones stay shared."""
    memo: dict[int, torch.Tensor] = {}
    for m in block.modules():
        for store in (m._parameters, m._buffers):
            for key, t in store.items():
                if t is not None:
                    store[key] = memo.setdefault(id(t), _meta_like(t))


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    empty = torch.empty(t.shape, dtype=t.dtype, device="meta")
    return nn.Parameter(empty, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else empty


def _is_meta(module: nn.Module) -> bool:
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))


def _numel(module: nn.Module) -> int:
    """Parameter elements held here: the CPU (or device) ones, a sharded one's local shard only."""
    return sum(getattr(p, "_local_tensor", p).numel() for p in module.parameters() if not p.is_meta)
