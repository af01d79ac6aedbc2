"""Batched beam search for the encoder-decoder (model/seq2seq.py), in fairseq's manner.

Each sentence keeps `K` live hypotheses, all sentences in one batch of B x K rows sharing one decoder
key/value cache. At each step the 2K best extensions of a sentence's beams are taken: those that end
in <eod> among the first K are finished (scored log p / length ** length_penalty, the length counting
the <eod>), the best K that do not end become the next beams and the cache rows follow them. A
sentence is done when it has K finished hypotheses; at `max_new_tokens` its live beams are finished
as they are. The best finished hypothesis is returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blocklab.model.base import padding_mask


@dataclass
class BeamResult:
    tokens: torch.Tensor  # (B, 1 + L): <eod> (start), the hypothesis, <eod> if it ended, then <pad>
    scores: torch.Tensor  # (B,) the hypotheses' summed log-probabilities
    normalized: torch.Tensor  # (B,) scores / length ** length_penalty


@torch.no_grad()
def beam_search(
    model, input_ids, attention_mask=None, num_beams: int = 4, max_new_tokens: int = 64, length_penalty: float = 1.0
) -> BeamResult:
    B, K, dev = input_ids.shape[0], num_beams, input_ids.device
    eos, pad = model.eos_id, model.pad_id
    memory, _ = model.encode(input_ids, attention_mask)
    memory = memory.repeat_interleave(K, 0)
    mask = attention_mask.repeat_interleave(K, 0) if attention_mask is not None else None
    cache, src_mask = model.init_cache(memory), padding_mask(mask)
    tokens = torch.full((B * K, 1), eos, dtype=torch.long, device=dev)
    scores = torch.full((B, K), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # all beams start identical: only the first may extend, or the K would be copies
    finished: list[list[tuple[float, float, list[int]]]] = [[] for _ in range(B)]
    base = (torch.arange(B, device=dev) * K)[:, None]
    steps = model.max_new_tokens(max_new_tokens)
    for t in range(steps):
        logp = torch.log_softmax(model.next_token_logits(tokens[:, -1:], t, cache, src_mask), -1)
        V = logp.shape[-1]
        cand = (scores.view(B * K, 1) + logp).view(B, K * V)
        top, idx = cand.topk(2 * K, dim=1)
        beam, tok = idx // V, idx % V
        ended = tok == eos
        rank = torch.arange(2 * K, device=dev).expand(B, -1)
        for b, r in ended[:, :K].nonzero().tolist():  # finish hypotheses ranked among the first K
            if len(finished[b]) < K and top[b, r] > float("-inf"):
                seq = tokens[base[b, 0] + beam[b, r], 1:].tolist() + [eos]
                finished[b].append((top[b, r].item() / len(seq) ** length_penalty, top[b, r].item(), seq))
        if all(len(f) >= K for f in finished):
            break
        # The first K candidates that do not end: a stable sort puts ended ones last, ranks kept.
        keep = (ended.long() * 2 * K + rank).argsort(dim=1)[:, :K]
        scores, beam, tok = top.gather(1, keep), beam.gather(1, keep), tok.gather(1, keep)
        rows = (base + beam).view(-1)
        for c in cache:
            c.reorder(rows)
        tokens = torch.cat([tokens[rows], tok.view(-1, 1)], 1)
    for b in range(B):  # sentences still open at the length limit: their live beams, unended
        if len(finished[b]) < K:
            for k in range(K):
                s = scores[b, k].item()
                if s > float("-inf"):
                    seq = tokens[b * K + k, 1:].tolist()
                    finished[b].append((s / max(len(seq), 1) ** length_penalty, s, seq))
    best = [max(f, key=lambda h: h[0]) for f in finished]
    L = max(len(h[2]) for h in best)
    out = torch.full((B, 1 + L), pad, dtype=torch.long, device=dev)
    out[:, 0] = eos
    for b, (_, _, seq) in enumerate(best):
        out[b, 1 : 1 + len(seq)] = torch.tensor(seq, dtype=torch.long, device=dev)
    return BeamResult(out, torch.tensor([h[1] for h in best]), torch.tensor([h[0] for h in best]))
