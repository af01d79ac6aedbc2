"""The encoder-decoder Transformer of Xiong et al.'s translation experiments (fairseq's `transformer`).

Encoder: `n_layers` blocks of the chosen type (the registry's Post-LN / Pre-LN blocks, bidirectional,
source padding as a key mask). Decoder: `n_decoder_layers` of the block's decoder blocks (its
`BlockSpec.decoder`, blocks/decoder.py), each a causal self-attention, a cross-attention over the
encoder output and the MLP sub-block, arranged as the block type says:

    post-ln:  u = Norm(x + SA(x));        v = Norm(u + CA(u, m));        y = Norm(v + MLP(v))
    pre-ln:   u = x + SA(Norm(x));        v = u + CA(Norm(u), m);        y = v + MLP(Norm(v))

with a final Norm after the Pre-LN encoder and decoder (none for Post-LN), dropout on each residual
branch and on the embeddings (fairseq's `dropout`), one embedding matrix shared by the source, the
target and the output head. Blocks without a decoder are not offered here (ModelConfig says so);
the simplified blocks have none:
shaped attention is defined for self-attention, where `alpha I` is the identity on the sequence; a
cross-attention has no such identity, so a "simplified" decoder block would be a design of its own.

Decoding keeps, per decoder layer, the self-attention keys and values of the tokens so far and the
cross-attention keys and values of the source (computed once): each new token costs O(T).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from blocklab.blocks import REGISTRY
from blocklab.blocks.decoder import LayerCache
from blocklab.config import ModelConfig
from blocklab.layers import Dropout, norm_layer
from blocklab.model.base import TokenModel, check_ids, init_weights, padding_mask
from blocklab.model.beam import beam_search
from blocklab.tokens import EOS_ID, IGNORE_INDEX, MASK_ID, PAD_ID

# The special ids are blocklab.tokens' (the tokenizer's): <eod> ends a sentence and, as in fairseq,
# starts the decoder's input; decoding never produces <pad> or <mask>.


@dataclass
class Seq2SeqOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor | None
    encoder_hidden_states: tuple[torch.Tensor, ...] | None = None


class Seq2Seq(TokenModel):
    """Encoder-decoder translation model; `blocks` are the encoder's, `decoder_blocks` the decoder's."""

    pad_id, eos_id = PAD_ID, EOS_ID

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        spec = REGISTRY[cfg.block]
        self.embeddings(cfg, "src_pos", "tgt_pos")  # `tok` is shared by source, target and (tied) output head
        self.drop = Dropout(cfg.dropout)
        self.blocks = self.build_blocks(lambda i: spec.cls(cfg, i), cfg.n_layers)
        self.decoder_blocks = nn.ModuleList(spec.decoder(cfg, i) for i in range(self.n_decoder_layers))
        norm = (lambda: norm_layer(cfg)) if spec.final_norm else nn.Identity
        self.encoder_norm, self.decoder_norm = norm(), norm()
        self.output_head(cfg)
        init_weights(self, cfg)

    @property
    def n_decoder_layers(self) -> int:
        return self.cfg.n_decoder_layers or self.cfg.n_layers

    def embed(self, ids: torch.Tensor, side: str, start: int = 0) -> torch.Tensor:
        T = ids.shape[1]
        if start + T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {start + T} exceeds max_seq_len={self.cfg.max_seq_len}")
        return self.drop(self.token_embedding(ids, "src_pos" if side == "src" else "tgt_pos", start))

    def encode(self, input_ids, attention_mask=None, output_hidden_states=False):
        """The encoder output (B, S, d) (and each block's output when asked)."""
        check_ids(input_ids)
        key_mask = attention_mask.bool() if attention_mask is not None else None
        x, hidden = self.run_blocks(self.blocks, self.embed(input_ids, "src"), key_mask, output_hidden_states)
        return self.encoder_norm(x), hidden

    def memory_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [b.cross_attn.keys_values(memory) for b in self.decoder_blocks]

    def decode(self, decoder_input_ids, memory, attention_mask=None, decoder_attention_mask=None):
        """Decoder hidden states (B, T, d) after the final norm, for teacher-forced target prefixes."""
        x = self.embed(decoder_input_ids, "tgt")
        src_mask, self_mask = padding_mask(attention_mask), padding_mask(decoder_attention_mask)
        for block, kv in zip(self.decoder_blocks, self.memory_kv(memory)):
            x = block(x, kv, src_mask, self_mask)
        return self.decoder_norm(x)

    def forward(
        self,
        input_ids,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        labels=None,
        loss_reduction: str = "mean",
        return_logits: bool = True,
        label_smoothing: float = 0.0,
        output_hidden_states: bool = False,
    ) -> Seq2SeqOutput:
        """`labels` are aligned with `decoder_input_ids` (labels[t] is the target of logits[t]); -100 is ignored.
        Without `decoder_input_ids`, they are the labels shifted right behind <eod>, as in fairseq."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("give decoder_input_ids (or labels, from which they are shifted)")
            start = torch.full_like(labels[:, :1], self.eos_id)
            decoder_input_ids = torch.cat([start, labels[:, :-1].clamp_min(0)], 1)
            decoder_input_ids = decoder_input_ids.masked_fill(
                torch.cat([start, labels[:, :-1]], 1) == IGNORE_INDEX, self.pad_id
            )
        memory, hidden = self.encode(input_ids, attention_mask, output_hidden_states)
        x = self.decode(decoder_input_ids, memory, attention_mask, decoder_attention_mask)
        logits, loss = self.logits_and_loss(x, labels, loss_reduction, return_logits, label_smoothing)
        return Seq2SeqOutput(loss, logits, hidden)

    # --- incremental decoding --------------------------------------------------------------

    def init_cache(self, memory: torch.Tensor) -> list[LayerCache]:
        return [LayerCache(k, v) for k, v in self.memory_kv(memory)]

    def decode_step(self, tokens: torch.Tensor, position: int, cache: list[LayerCache], src_mask) -> torch.Tensor:
        """Next-token logits (B, V) for the newest target token (B, 1) at `position`, extending `cache`.
        `src_mask`: the (B, S) boolean mask of padding_mask, or None."""
        x = self.embed(tokens, "tgt", start=position)
        for block, c in zip(self.decoder_blocks, cache):
            x = block(x, c.cross_kv, src_mask, cache=c)
        return (self.decoder_norm(x[:, -1]) @ self.head_weight.t()).float()

    def next_token_logits(self, tokens, position, cache, src_mask) -> torch.Tensor:
        """decode_step's logits with the tokens no translation contains (<pad>, <mask>) ruled out."""
        logits = self.decode_step(tokens, position, cache, src_mask)
        logits[:, [PAD_ID, MASK_ID]] = float("-inf")
        return logits

    def max_new_tokens(self, asked: int) -> int:
        return max(0, min(asked, self.cfg.max_seq_len - 1))  # the start token takes target position 0

    @torch.no_grad()
    def greedy(self, input_ids, attention_mask=None, max_new_tokens: int = 64) -> torch.Tensor:
        """The most likely next token at each step; rows that have ended continue with <pad>."""
        memory, _ = self.encode(input_ids, attention_mask)
        cache, src_mask = self.init_cache(memory), padding_mask(attention_mask)
        out = torch.full((input_ids.shape[0], 1), self.eos_id, dtype=torch.long, device=input_ids.device)
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for t in range(self.max_new_tokens(max_new_tokens)):
            nxt = self.next_token_logits(out[:, -1:], t, cache, src_mask).argmax(-1)
            nxt = nxt.masked_fill(done, self.pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == self.eos_id
            if bool(done.all()):
                break
        return out

    @torch.no_grad()
    def generate(
        self, input_ids, attention_mask=None, max_new_tokens: int = 64, num_beams: int = 1, length_penalty: float = 1.0
    ) -> torch.Tensor:
        """(B, <= 1 + max_new_tokens) token ids: <eod> (the start), the translation, <eod>, then <pad>.

        num_beams 1 is greedy; more is batched beam search (model/beam.py) whose hypotheses are ranked
        by log-probability / length ** length_penalty (fairseq's `--lenpen`)."""
        if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
            raise ValueError(f"num_beams={num_beams!r} is not valid; it must be a positive integer")
        was_training = self.training
        self.eval()
        try:
            if num_beams == 1:
                return self.greedy(input_ids, attention_mask, max_new_tokens)
            return beam_search(self, input_ids, attention_mask, num_beams, max_new_tokens, length_penalty).tokens
        finally:
            self.train(was_training)
