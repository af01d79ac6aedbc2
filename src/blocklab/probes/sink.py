"""Where the attention looks and what its gate lets through, per layer and head, on one model and one batch: the
probes of gated attention (Qiu et al. 2025, arXiv 2505.06708), whose paper reports that a sigmoid gate after SDPA
removes the "attention sink" (most of the attention mass on the first token) and that the trained gate is sparse.

- `first_token_mass`: per self-attention and head, the attention probability on key 0 averaged over the real
  queries at positions 1.. (query 0 of a causal attention can only see key 0) and the batch. `uniform` is the
  same average for attention spread evenly over the keys each query may see, the level without any sink.
- `gate_mean`: per gated attention and head, the gate sigmoid(x W_g) averaged over its channels, the real
  tokens and the batch: 0.5 for a zero W_g, lower where the trained gate closes.

The attention probabilities come from the module's own `probabilities` (the softmax its forward computes) on the
input a forward pre-hook captured, so the equations live in the attention module only.
"""

from __future__ import annotations

import torch

from blocklab.attention.modules import MultiHeadAttention


def _query_weights(mask: torch.Tensor | None, B: int, T: int, device) -> torch.Tensor:
    """(B, T) weights of the queries averaged over: real tokens at positions >= 1, normalised to sum to 1."""
    w = torch.ones(B, T, device=device) if mask is None else mask.float().to(device)
    w = w.clone()
    w[:, 0] = 0.0
    return w / w.sum().clamp_min(1.0)


def first_token_mass(attn: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None) -> list[float]:
    """Per head, the mean attention on key 0 over the real queries at positions >= 1 (module docstring)."""
    key_mask = mask.bool() if mask is not None else None
    A = attn.probabilities(x, key_mask).float()  # (B, H, T, T)
    w = _query_weights(mask, x.shape[0], x.shape[1], x.device)
    return torch.einsum("bht,bt->h", A[..., 0], w).tolist()


def uniform_first_token_mass(causal: bool, mask: torch.Tensor | None, B: int, T: int) -> float:
    """What first_token_mass would read for attention spread evenly over the keys each query may see."""
    real = torch.ones(B, T) if mask is None else mask.float().cpu()
    seen = real.cumsum(1) if causal else real.sum(1, keepdim=True).expand(B, T)
    w = _query_weights(mask, B, T, "cpu")
    return float((w / seen.clamp_min(1.0)).sum())


def gate_mean(attn: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None) -> list[float] | None:
    """Per head, the gate's mean over its channels and the real tokens; None for an ungated attention."""
    if attn.gate is None:
        return None
    g = attn.gate(x).float().mean(-1)  # (B, T, H)
    w = torch.ones(g.shape[:2], device=g.device) if mask is None else mask.float().to(g.device)
    return (torch.einsum("bth,bt->h", g, w) / w.sum().clamp_min(1.0)).tolist()


def attention_measures(captured, mask: torch.Tensor | None) -> dict | None:
    """The sink and gate measures of every self-attention captured (module, input x), in call order; None where
    the model has no MultiHeadAttention (shaped attention, nGPT's)."""
    rows = [(m, x) for m, x in captured if isinstance(m, MultiHeadAttention)]
    if not rows:
        return None
    B, T = rows[0][1].shape[:2]
    out = {
        "first_token_mass": [first_token_mass(m, x, mask) for m, x in rows],
        "uniform": uniform_first_token_mass(rows[0][0].causal, mask, B, T),
    }
    gates = [gate_mean(m, x, mask) for m, x in rows]
    if any(g is not None for g in gates):
        out["gate_mean"] = gates
    return out
