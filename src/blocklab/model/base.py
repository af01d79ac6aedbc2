"""What the language model (model/model.py) and the encoder-decoder (model/seq2seq.py) share: the token
embedding, the positions, the (tied) output head, the loss over it, the block loop and the
initialisation (docs/models.md#initialisation)."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar

import torch
import torch.nn as nn

from blocklab.blocks import REGISTRY, model_hooks
from blocklab.config import ModelConfig
from blocklab.layers import Embedding, InitRule, embedding_init_of, norm_layer, weight_init_of
from blocklab.model.loss import chunked_cross_entropy

# While set (training/materialise.py), a token model's blocks are made by it (`TokenModel.build_blocks` hands it
# their constructor and their number) and init_weights leaves the whole initialisation to it: FSDP's build,
# which keeps the blocks on the meta device until each is sharded, so that no process holds the whole model.
BLOCK_BUILDER: ContextVar[Callable[[Callable[[int], nn.Module], int], nn.ModuleList] | None] = ContextVar(
    "block_builder", default=None
)


def sinusoidal(T: int, d: int) -> torch.Tensor:
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(T, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq[: d // 2])
    return table


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """`normal`: std 0.02 everywhere (He & Hofmann). `xavier`: Xiong et al.'s code (fairseq): every Linear
    Xavier-uniform at the gain its WeightInit declares (1/sqrt(2) on MultiHeadAttention's query, key and
    value projections, as fairseq's `MultiheadAttention.reset_parameters`), 1 otherwise; token and
    learned position embeddings N(0, 1/d) (fairseq: `normal_(0, d**-0.5)`). Biases start at zero either way.

    A Linear whose WeightInit (blocklab.layers) says otherwise starts so under either init: zero (shaped
    attention's W^Q, the dW of I + dW), Xavier-normal or -uniform at its gain (DeepNorm's, T-Fixup's) or normal
    at gain / sqrt(fan_in) (MUDDFormer's); an
    Embedding that declares an EmbeddingInit is drawn N(0, std^2) at its std. The modules are drawn
    in the order model.modules() lists them; a token model's block then has its `after_update` hook
    (blocks/hooks.py), so that it starts as it trains, and last its `after_init` hook, once.
    """
    if BLOCK_BUILDER.get() is not None:
        return  # a deferred build (training/materialise.py) initialises the model unit by unit, in this order
    for m in model.modules():
        init_module(m, cfg)
    if isinstance(model, TokenModel):
        model.after_optimizer_step()
        model.block_hooks.after_init(model)  # last: it reads the model as initialised (Admin's profiling)


@torch.no_grad()
def init_module(m: nn.Module, cfg: ModelConfig) -> None:
    """One module's start under init_weights (a Linear's or an Embedding's; any other module has none of its own)."""
    if isinstance(m, nn.Linear):
        spec = weight_init_of(m)
        if spec.rule is InitRule.ZEROS:
            nn.init.zeros_(m.weight)
        elif spec.rule is InitRule.XAVIER_NORMAL:
            nn.init.xavier_normal_(m.weight, gain=spec.gain)
        elif spec.rule is InitRule.FAN_IN_NORMAL:
            nn.init.normal_(m.weight, std=spec.gain / math.sqrt(m.in_features))
        elif cfg.init == "normal" and spec.rule is InitRule.CONFIG:
            nn.init.normal_(m.weight, std=0.02)
        else:  # the config's Xavier-uniform, or one the module declares under either init
            nn.init.xavier_uniform_(m.weight, gain=spec.gain)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        own = embedding_init_of(m)
        std = own.std if own is not None else 0.02 if cfg.init == "normal" else cfg.d_model**-0.5
        nn.init.normal_(m.weight, std=std)


def check_ids(input_ids: torch.Tensor) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}")


def padding_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) padding mask (1 = token) -> boolean (B, T) key mask; None when nothing is padded."""
    if mask is None or bool(mask.all()):
        return None
    return mask.bool()


def lm_head_params(block: str) -> tuple[str, ...]:
    """The prefixes of the parameter names of a language model's output head only (an untied head, the
    block's head parameters): a fine-tuned classifier has none of them (training/pretrained.py leaves
    them out of the encoder it loads)."""
    return ("head.", *(f"{name}." for name in model_hooks(block).head_params))


class TokenModel(nn.Module):
    """Base of both models. A subclass builds, in this order (the order the modules are made in is the
    order `init_weights` draws their values in): `embeddings(cfg, *positions)`, its blocks (`build_blocks`) and norms,
    `output_head(cfg)`, then calls `init_weights(self, cfg)`.

    Parameter names (checkpoints rely on them): `tok` (the token embedding, shared by every input and,
    tied, the output head), one learned position table per name given (`pos`; `src_pos`, `tgt_pos`) or
    the `pos_table` buffer for sinusoidal positions, `head` when the embeddings are not tied, and the
    block's head parameters (its hooks' `head_params`).

    The block's hooks (blocks/hooks.py, `block_hooks`) are the only way the block reaches the model
    around it: head parameters, the matrix the logits use, a step after every update.
    """

    def embeddings(self, cfg: ModelConfig, *positions: str) -> None:
        d = cfg.d_model
        self.block_hooks = model_hooks(cfg.block)
        # None unless the block's paper fixes the token embedding's start
        self.tok = Embedding(cfg.vocab_size, d, weight_init=self.block_hooks.token_embedding_init(cfg))
        if cfg.positions == "learned":
            for name in positions:
                setattr(self, name, nn.Embedding(cfg.max_seq_len, d))
        else:
            self.register_buffer("pos_table", sinusoidal(cfg.max_seq_len, d), persistent=False)
        # Xiong et al./fairseq: embeddings ~ N(0, 1/d) scaled by sqrt(d) so E|x_0|^2 = d, while the
        # tied head still sees unit-scale weights.
        self.embed_scale = math.sqrt(d) if cfg.init == "xavier" else 1.0

    @torch.no_grad()
    def reset_buffers(self) -> None:
        """The non-persistent buffers computed again (no checkpoint holds them): what a model built on the
        meta device (a `transformers` load) needs once its parameters are in. Every module with such a
        buffer has this method (tests/model/test_buffers.py)."""
        if self.cfg.positions != "learned":
            self.pos_table.copy_(sinusoidal(self.cfg.max_seq_len, self.cfg.d_model))

    def output_head(self, cfg: ModelConfig) -> None:
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.block_hooks.add_head(self, cfg)

    def token_embedding(self, ids: torch.Tensor, positions: str, start: int = 0, position_ids=None) -> torch.Tensor:
        """tok(ids) * embed_scale + the positions start .. start + T - 1 of the table `positions`, or each
        token's own (`position_ids`, (B, T): a left-padded row's first token at 0)."""
        T = ids.shape[1]
        table = getattr(self, positions).weight if self.cfg.positions == "learned" else self.pos_table
        pos = table[start : start + T] if position_ids is None else table[position_ids]
        return self.tok(ids) * self.embed_scale + pos

    def encoder_stack(self, cfg: ModelConfig) -> None:
        """The embeddings (`pos` positions), cfg.n_layers blocks and the final norm of an encoder or a
        decoder-only model, built in this order (the order init_weights draws in)."""
        spec = REGISTRY[cfg.block]
        self.embeddings(cfg, "pos")
        self.blocks = self.build_blocks(lambda i: spec.cls(cfg, i), cfg.n_layers)
        self.final_norm = norm_layer(cfg) if spec.final_norm else nn.Identity()

    def build_blocks(self, make: Callable[[int], nn.Module], n: int) -> nn.ModuleList:
        """The blocks make(0) .. make(n - 1), in this order; a BLOCK_BUILDER, while one is set, makes them."""
        builder = BLOCK_BUILDER.get()
        return nn.ModuleList(make(i) for i in range(n)) if builder is None else builder(make, n)

    def encode(
        self, input_ids: torch.Tensor, attention_mask=None, output_hidden_states: bool = False, position_ids=None
    ):
        """(final-normed hidden states (B, T, d), every block's output when asked) of encoder_stack; the
        positions 0 .. T - 1, or `position_ids` (B, T)."""
        check_ids(input_ids)
        if input_ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_seq_len={self.cfg.max_seq_len}")
        key_mask = attention_mask.bool() if attention_mask is not None else None
        x = self.token_embedding(input_ids, "pos", position_ids=position_ids)
        x, hidden = self.run_blocks(self.blocks, x, key_mask, output_hidden_states)
        return self.final_norm(x), hidden

    @torch.no_grad()
    def after_optimizer_step(self) -> None:
        """Called by the trainer after every optimizer step (and by init_weights): the block's
        `after_update` hook (a block whose weights live on a constraint set puts them back there)."""
        self.block_hooks.after_update(self)

    def token_matrices(self) -> list[torch.Tensor]:
        """The (V, d) matrices whose rows are tokens: the embedding, and the head when it is not tied."""
        head = getattr(self, "head", None)
        return [self.tok.weight] + ([head.weight] if head is not None else [])

    @property
    def head_matrix(self) -> torch.Tensor:
        """The output projection's weights as stored: the untied head's, or the token embedding."""
        return self.head.weight if getattr(self, "head", None) is not None else self.tok.weight

    @property
    def head_weight(self) -> torch.Tensor:
        """What the logits are computed with: head_matrix as the block's `head_weight` hook gives it."""
        return self.block_hooks.head_weight(self, self.head_matrix)

    def run_blocks(self, blocks, x: torch.Tensor, key_mask, output_hidden_states: bool = False):
        """x through `blocks`, the residual stream's state passed from block to block (the hooks' `enter` and
        `leave`: x itself for most blocks); each block's hidden state too when asked (after the input x)."""
        hooks = self.block_hooks
        state = hooks.enter(self, x)
        hidden = [x]
        for block in blocks:
            state = block(state, key_mask)
            if output_hidden_states:
                hidden.append(hooks.leave(self, state))
        return hooks.leave(self, state), (tuple(hidden) if output_hidden_states else None)

    def logits_and_loss(
        self,
        x: torch.Tensor,
        labels=None,
        loss_reduction: str = "mean",
        return_logits: bool = True,
        label_smoothing: float = 0.0,
    ):
        """Logits of the final hidden states x over the head, and the loss of `labels` (model/loss.py:
        never the fp32 (B, T, V) logits)."""
        w = self.head_weight
        logits = x @ w.t() if return_logits else None
        loss = None
        if labels is not None:
            loss = chunked_cross_entropy(x, w, labels, loss_reduction, label_smoothing)
        return logits, loss
