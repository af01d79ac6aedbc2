"""ResFormer's value residual (Zhou et al. 2024, "Value Residual Learning", arXiv 2410.17897; official code
Zcchill/Value-Residual-Learning): a Pre-LN stack whose attention in every layer n >= 2 mixes the first
layer's values into its own before its attention matrix weighs them,

    U_n = A_n V_n',   V_n' = lambda_{n,1} V_1 + lambda_{n,2} V_n,   V_n = Norm(x_{n-1}) W^V_n,

so that token-level information reaches the deep layers through the values, not the hidden state.

The first layer's values travel beside the hidden state: the stream's state is the pair (x, V_1)
(`FirstValues`, the model hooks of blocks/hooks.py), so the token model knows nothing of them.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention import MultiHeadAttention
from blocklab.attention.functional import split_heads
from blocklab.blocks.hooks import ModelHooks
from blocklab.config import ModelConfig
from blocklab.layers import MLP, Dropout, gain, norm_layer
from blocklab.registry import Predictions, register

# Identity-ResFormer's lambda_{n,1} = lambda_{n,2} = 0.5 (the official code's `0.5*formal_layer_values[0] +
# 0.5*value_states`), and Learnable-ResFormer's initial value of both.
LAMBDA = 0.5


class FirstValues(ModelHooks):
    """The residual stream's state is (x, V_1): the hidden state and the first layer's values, None until the
    first block has made them. The hidden state the final norm and the probes read is x."""

    def enter(self, model: nn.Module, x: torch.Tensor):
        return x, None

    def leave(self, model: nn.Module, state) -> torch.Tensor:
        return state[0]


class ValueResidualAttention(MultiHeadAttention):
    """MHA whose values in layers n >= 2 are lambda_1 V_1 + lambda_2 V_n; layer 1 keeps its own and hands them on.

    What the paper leaves open, as the official code (src/modeling/modeling_llama_resformer.py,
    `LlamaAttention.forward`) settles it:
    - V_1 is the first layer's values after its projection W^V_1 (bias included, if any), unmixed: the
      code keeps `v_proj(hidden_states)` of layer 0, and layer 0 attends over them as they are.
    - Every later layer mixes that same V_1, never the previous layer's mixed values.
    - V_1 is not detached: later layers' gradients reach W^V_1 through it (as in the code).
    - The values are mixed before the head split, as in the code (a scalar mix commutes with the split),
      and V_1 travels as the (B, T, d) projection itself: a fresh tensor, not a view of it (FSDP2 warns
      of a block that returns a view).
    - One pair (lambda_{n,1}, lambda_{n,2}) per layer n >= 2 (the paper's per-layer lambdas). Learnable
      (`value_residual_learnable`), they are scalar gains: no weight decay (the package's rule for every
      gain; the paper says nothing of it). Fixed, they are buffers, so no optimizer sees them.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__(cfg)
        self.first = layer == 0
        if self.first:
            return  # layer 1's values are V_1 themselves: no lambdas (they would get no gradient)
        if cfg.value_residual_learnable:
            self.lambda1, self.lambda2 = gain(LAMBDA), gain(LAMBDA)
        else:
            # Not persistent: constants, so a checkpoint holds exactly Pre-LN's tensors.
            self.register_buffer("lambda1", torch.tensor(LAMBDA), persistent=False)
            self.register_buffer("lambda2", torch.tensor(LAMBDA), persistent=False)

    @torch.no_grad()
    def reset_buffers(self) -> None:
        """The fixed lambdas again: a model built on the meta device (a `transformers` load) has none."""
        if not self.first and not self.cfg.value_residual_learnable:
            self.lambda1.fill_(LAMBDA)
            self.lambda2.fill_(LAMBDA)

    def forward(
        self, x: torch.Tensor, v1: torch.Tensor | None, key_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(MHA output, V_1), both (B, T, d), for x = Norm(x_{n-1}); `v1` is None in layer 1."""
        H = self.cfg.n_heads
        v = self.v(x)
        if self.first:
            v1 = v
        else:
            v = self.lambda1 * v1 + self.lambda2 * v
        k = split_heads(self.k(x), H)  # as keys_values, which would project the values a second time
        if self.qk_norm is not None:
            k = self.qk_norm.k(k)
        return super().forward(x, key_mask, kv=(k, split_heads(v, H))), v1


@register(
    "value-residual",
    label="ResFormer",
    family="stream",
    colour="#6b6ecf",
    dropout=True,
    model_hooks=FirstValues(),
    predictions=Predictions(
        hidden_norm="residual",
        hidden_norm_source="Xiong et al. Lemma 2 argument: 0.5 V_1 + 0.5 V_n (independent W^V) has half one "
        "layer's value variance, so attention still adds between 0 and its own",
        last_ffn_slope=-0.5,
        last_ffn_source="Xiong et al. Thm 1 argument (residual norm ~ L, as Pre-LN): ~ 1/sqrt(L)",
    ),
)
class ValueResidual(nn.Module):
    """u = x + MHA(Norm(x)) with values V_n <- lambda_1 V_1 + lambda_2 V_n for n >= 2; y = u + MLP(Norm(u)).

    ResFormer (Zhou et al. 2024, Sec. 3, "ResFormer": V_n' = lambda_{n,1} V_1 + lambda_{n,2} H_{n-1} W^V_n).
    Constants: lambda_{n,1} = lambda_{n,2} = 0.5, fixed (Identity-ResFormer, the official code's constant)
    or, with `value_residual_learnable`, trained from 0.5 (Learnable-ResFormer). Everything else is Pre-LN:
    the same modules under the same names (`attn`, `mlp`, `norms`), so Pre-LN's weights load as they are,
    and with lambda_1 = 0, lambda_2 = 1 the block is exactly Pre-LN. No recipe: the paper's AdamW settings
    are those of every model it compares, the Transformer baseline's too, not part of the method.
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn = ValueResidualAttention(cfg, layer)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, cfg.mlp_bias or cfg.bias)
        self.norms = nn.ModuleList(norm_layer(cfg) for _ in range(2))
        self.drop = Dropout(cfg.dropout)  # on each residual branch, as Pre-LN

    def forward(self, state, key_mask=None):
        """state = (x, V_1), V_1 None before the first block; returns (y, V_1).

        V_1 is an output of every block, so that FSDP2 hooks the first block's backward to it. Under FSDP2 a
        later block hands on the view FSDP made of its V_1 input, and FSDP2 warns once of a returned view:
        harmless, nothing writes to V_1 in place (sharded steps equal one process's, as for every block)."""
        x, v1 = state
        a, v1 = self.attn(self.norms[0](x), v1, key_mask)
        u = x + self.drop(a)
        return u + self.drop(self.mlp(self.norms[1](u))), v1
