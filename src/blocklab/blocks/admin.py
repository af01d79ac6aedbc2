"""Admin, adaptive model initialisation (Liu et al. 2020, "Understanding the Difficulty of Training Transformers",
EMNLP 2020, arXiv 2004.08249): a Post-LN block whose skip on every sub-layer k is rescaled by a learnable d-vector
omega_k, set by one profiling pass at initialisation:

    x <- LN(omega_k * x + F_k(x))       for F_k = self-attention, [cross-attention,] MLP
    omega_1 = 1;    omega_{k+1} = sqrt(Var(omega_k * x_k) + Var(F_k(x_k)))

over the sub-layers k of one stack in the order the forward pass meets them (the encoder and the decoder each from
1), x_k the input of sub-layer k, each variance one number over the whole batch. The pass is a training-mode
forward at the end of `build_model` (the `after_init` hook) on a pseudo-random batch seeded from the run's seed; it
leaves every other parameter, and torch's global generator, as they were.

The paper, the official code read (LiyuanLucasLiu/Transformer-Clinic) and what it settled, where blocklab differs
and why: docs/blocks.md#admin.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn

from blocklab.blocks.classic import ClassicBlock
from blocklab.blocks.decoder import DecoderBlock
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import gain
from blocklab.registry import Predictions, register

PROFILE_TOKENS = 1024  # tokens of the profiling batch (per stack): a variance over 1024 x d numbers
SEED_OFFSET = 0x41444D494E  # "ADMIN": the profiling seed is torch's initial seed plus this


def variance(t: torch.Tensor) -> float:
    """The population variance of every element of `t` (the official code's `np.var` of the flattened tensor)."""
    return t.detach().double().var(correction=0).item()


class Profile:
    """One stack's profiling pass: the running ratio, 1 before the stack's first sub-layer."""

    def __init__(self) -> None:
        self.ratio = 1.0

    def step(self, omega: nn.Parameter, x: torch.Tensor, f: torch.Tensor) -> None:
        """Set omega to the running ratio, then advance it: sqrt(Var(omega x) + Var(F(x)))."""
        omega.fill_(self.ratio)
        self.ratio = math.sqrt(variance(omega * x) + variance(f))


def omegas(cfg: ModelConfig, n: int) -> nn.ParameterList:
    """n trainable d-vectors, one per sub-layer; 1 until the profiling pass sets them (no random draw: the
    weights drawn after them are Post-LN's)."""
    return nn.ParameterList(gain(1.0, cfg.d_model) for _ in range(n))


class AdminResidual:
    """The residual of sub-layer k, LN_k(omega_k * x + f), with `norms` and `omegas` indexed alike. While a
    `Profile` is attached (`profile`, only during the pass of AdminProfiling), it sets omega_k first."""

    profile: Profile | None = None

    def residual(self, k: int, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        omega = self.omegas[k]
        if self.profile is not None:
            self.profile.step(omega, x, f)
        return self.norms[k](omega * x + f)


def profiling_seed() -> int:
    """The seed of the profiling batch and its dropout, from torch's initial seed (the run's seed)."""
    return (torch.initial_seed() + SEED_OFFSET) % 2**63


def profiling_ids(cfg: ModelConfig, generator: torch.Generator) -> torch.Tensor:
    """(max(1, PROFILE_TOKENS // max_seq_len), max_seq_len) token ids, uniform over the vocabulary."""
    T = cfg.max_seq_len
    return torch.randint(cfg.vocab_size, (max(1, PROFILE_TOKENS // T), T), generator=generator)


@contextlib.contextmanager
def private_rng(device: torch.device, seed: int):
    """torch's global generator(s) of `device` seeded with `seed` inside, and restored on leaving: the pass's
    dropout is reproducible and the weights' random stream goes on as if the pass had not run."""
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if cuda else []):
        if cuda:
            torch.manual_seed(seed)  # every CUDA device is forked, so seeding them all leaves no trace
        else:
            torch.random.default_generator.manual_seed(seed)  # the CPU only: CUDA's state stays unseeded
        yield


class AdminProfiling(ModelHooks):
    """Admin's profiling pass, once, at the end of `init_weights` (the `after_init` hook; blocks/hooks.py)."""

    def after_init(self, model: nn.Module) -> None:
        profile_omegas(model)


@torch.no_grad()
def profile_omegas(model: nn.Module, seed: int | None = None) -> None:
    """Set every omega of `model` (a token model: `blocks`, and `decoder_blocks` for translation) by one training-
    mode forward pass over the profiling batch (`profiling_ids`); no gradient, no other parameter changed.

    `seed` defaults to `profiling_seed()`. The encoder (or the decoder-only stack) runs `model.encode` on the batch;
    the translation decoder then runs `model.decode` on a second batch drawn next, over that encoder output."""
    first = next(model.parameters())
    if first.is_meta:
        return
    seed = profiling_seed() if seed is None else seed
    g = torch.Generator().manual_seed(seed)
    src = profiling_ids(model.cfg, g).to(first.device)
    decoder = getattr(model, "decoder_blocks", None)
    tgt = profiling_ids(model.cfg, g).to(first.device) if decoder is not None else None
    stacks = [model.blocks] + ([decoder] if decoder is not None else [])
    for stack in stacks:
        p = Profile()  # one running ratio per stack, from 1
        for block in stack:
            block.profile = p
    was_training = model.training
    try:
        model.train()
        with private_rng(first.device, seed):
            memory, _ = model.encode(src)
            if decoder is not None:
                model.decode(tgt, memory)
    finally:
        for stack in stacks:
            for block in stack:
                block.profile = None
        model.train(was_training)


class AdminDecoderBlock(AdminResidual, DecoderBlock):
    """u = LN(w_1 x + SA(x)); v = LN(w_2 u + CA(u, m)); y = LN(w_3 v + MLP(v)), three profiled omegas."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer)
        self.omegas = omegas(cfg, 3)

    def forward(self, x, memory_kv, src_mask=None, self_mask=None, cache=None):
        u = self.residual(0, x, self.drop(self.sa(x, self_mask, cache)))
        v = self.residual(1, u, self.drop(self.ca(u, memory_kv, src_mask)))
        return self.residual(2, v, self.drop(self.mlp(v)))


@register(
    "admin",
    label="Admin",
    family="successor",
    colour="#843c39",
    final_norm=False,
    dropout=True,
    decoder=AdminDecoderBlock,
    model_hooks=AdminProfiling(),
    predictions=Predictions(hidden_norm="unit", hidden_norm_source="unit-gain Norm after each sub-layer: d"),
)
class Admin(AdminResidual, ClassicBlock):
    """u = LN(w_1 x + MHA(x)); y = LN(w_2 u + MLP(u)), each w a d-vector profiled at init (Liu et al. 2020)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg, layer, n_norms=2)
        self.omegas = omegas(cfg, 2)

    def forward(self, x, key_mask=None):
        u = self.residual(0, x, self.drop(self.attn(x, key_mask)))
        return self.residual(1, u, self.drop(self.mlp(u)))
