"""What the residual-stream blocks (docs/blocks.md#the-residual-stream) learn, measured on one model and one batch
(issue: the residual stream itself). Every block gets the hidden-state norm per layer (Xiong et al.'s Lemma 2 growth,
the "PreNorm dilution" these papers argue about); each stream block adds what it changes:

- Hyper-Connections / mHC: each sub-layer's residual mixing matrix M as it acts on the streams, new stream
  j = sum_i M[j, i] H_i (HC's A_r^T; mHC's H_res^T, as DeepSeek's reference applies H_res; n x n, the mean
  over tokens), its width connections (A_m / H_pre, B / H_post), and the gain of their product over depth.
  Gain is mHC's "Amax gain magnitude" (Xie et al. 2025, Sec. 3.1, Fig. 3): the largest absolute row sum of a
  mapping (what it does to the forward signal) and the largest absolute column sum (to the backward gradient),
  per token, averaged over the batch's tokens; the largest over tokens is kept too. The composite at
  sub-layer k is the product of the residual mappings of sub-layers 1..k, per token. mHC's doubly stochastic
  H_res bound it near 1 (its forward gain is 1 to eps: each row of H_res^T, a column of H_res, sums to 1);
  HC's do not.
- Attention Residuals: each mix's softmax weights over its sources (mean over tokens), a sub-layers by sources
  map. DenseFormer: each depth-weighted average's alphas (parameters; no batch needed), blocks by sources.
- ResFormer: each layer's (lambda_1, lambda_2).
- LAuReL: each sub-layer's low-rank path |B A x| against the identity's |x| (means over tokens).
- Every softmax self-attention: the attention mass on the first token per layer and head, and with attn_gate the
  gate's mean per head (probes/sink.py: gated attention's claim that the gate removes the sink).

The measurements read the blocks' own mapping functions (`connections`, `mappings`, `weights`) on the inputs
forward hooks capture, so an equation lives in its block only. Plain lists in the result: it is written as
JSON beside the run (experiments/stream_probes.py).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from blocklab.attention.modules import MultiHeadAttention
from blocklab.block_table import sublayer_name
from blocklab.blocks.depthmix import AttnRes, DenseFormer, DepthAttention
from blocklab.blocks.hyper import HyperConnection, ManifoldHyperConnection
from blocklab.blocks.laurel import LowRank
from blocklab.blocks.value_residual import ValueResidualAttention
from blocklab.probes.measure import hidden_sq_norms
from blocklab.probes.sink import attention_measures


def gains(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, the largest absolute row sum (forward) and column sum (backward) of M (..., n, n)."""
    return M.sum(-1).abs().amax(-1), M.sum(-2).abs().amax(-1)


def gain_curves(residuals: list[torch.Tensor]) -> dict:
    """mHC's Amax gain magnitudes, single and composite, of per-token residual mappings (tokens, n, n) in order."""
    out = {f"{kind}_{d}": [] for kind in ("single", "composite") for d in ("forward", "backward")}
    out |= {f"composite_{d}_max": [] for d in ("forward", "backward")}
    P = None
    for M in residuals:
        P = M if P is None else M @ P
        for kind, X in (("single", M), ("composite", P)):
            fwd, bwd = gains(X)
            out[f"{kind}_forward"].append(fwd.mean().item())
            out[f"{kind}_backward"].append(bwd.mean().item())
        fwd, bwd = gains(P)
        out["composite_forward_max"].append(fwd.max().item())
        out["composite_backward_max"].append(bwd.max().item())
    return out


class Capture:
    """The first positional input of every module of the given types, in call order, while active."""

    def __init__(self, model: nn.Module, types: tuple[type, ...]):
        self.modules = [m for m in model.modules() if isinstance(m, types)]
        self.inputs: list[tuple[nn.Module, torch.Tensor]] = []
        self.handles = [m.register_forward_pre_hook(self.hook) for m in self.modules]

    def hook(self, module, args):
        self.inputs.append((module, args[0]))

    def remove(self):
        for h in self.handles:
            h.remove()


def _tokens(x: torch.Tensor, mask: torch.Tensor | None, lead: int) -> torch.Tensor:
    """x (B, T, ...) after `lead` leading axes flattened to (real tokens, ...)."""
    x = x.flatten(lead, lead + 1) if lead else x.flatten(0, 1)
    if mask is None:
        return x.movedim(lead, 0) if lead else x
    keep = mask.flatten().bool()
    return (x.movedim(lead, 0) if lead else x)[keep]


def mixing(captured, mask) -> dict | None:
    """HC / mHC: the mappings of every sub-layer on the captured streams, means over tokens, and the gains."""
    rows = [(m, H) for m, H in captured if isinstance(m, (HyperConnection, ManifoldHyperConnection))]
    if not rows:
        return None
    residual, pre, post, per_token = [], [], [], []
    for m, H in rows:
        if isinstance(m, HyperConnection):
            alpha, beta = m.connections(H)
            n = m.n
            alpha = alpha.expand(*H.shape[:-2], n, n + 1) if alpha.dim() == 2 else alpha
            beta = beta.expand(*H.shape[:-2], n) if beta.dim() == 1 else beta
            M, p, q = alpha[..., 1:].transpose(-1, -2), alpha[..., 0], beta  # new stream j = sum_i A_r[i, j] H_i
        else:
            p, q, H_res = m.mappings(H)
            M = H_res.transpose(-1, -2)  # new stream n = sum_m H_res[m, n] x_m
        M, p, q = (_tokens(t.float(), mask, 0) for t in (M, p, q))
        per_token.append(M)
        residual.append(M.mean(0).tolist())
        pre.append(p.mean(0).tolist())
        post.append(q.mean(0).tolist())
    return {"residual": residual, "pre": pre, "post": post, "gain": gain_curves(per_token)}


def attn_res_weights(model, captured, mask) -> dict | None:
    """Attention Residuals: every mix's softmax weights over its sources, means over tokens, in call order."""
    mixes = [(m, v) for m, v in captured if isinstance(m, DepthAttention)]
    if not mixes:
        return None
    rows, names = [], []
    for i, (m, v) in enumerate(mixes):
        w = _tokens(m.weights(v).float(), mask, 1)  # (tokens, n)
        rows.append(w.mean(0).tolist())
        last = i == len(mixes) - 1
        names.append("final norm" if last else f"{sublayer_name(2 * (i // 2) + 1 + i % 2)} input")
    width = max(len(r) for r in rows)
    S = model.cfg.attn_res_block
    cols = ["embedding"] + (
        [sublayer_name(k) for k in range(width - 1)] if S in (0, 1) else [f"block {j}" for j in range(1, width)]
    )
    return {"rows": names, "cols": cols, "weights": [r + [None] * (width - len(r)) for r in rows]}


def denseformer_weights(model) -> dict | None:
    """DenseFormer: block i's alpha_ij over X_j (X_0 the embedding); None where its DWA does not read X_j."""
    blocks = [b for b in model.blocks if isinstance(b, DenseFormer)]
    if not blocks:
        return None
    L = len(blocks)
    rows, names = [], []
    for i, b in enumerate(blocks, start=1):
        if b.dwa is None:
            continue
        row: list = [None] * (L + 1)
        for w, j in zip(b.dwa.weight.tolist(), range(b.first, i + 1, b.k)):
            row[j] = w
        rows.append(row)
        names.append(f"block {i}")
    return {"rows": names, "cols": ["embedding"] + [f"block {j}" for j in range(1, L + 1)], "weights": rows}


def value_lambdas(model) -> list | None:
    """ResFormer: (lambda_1, lambda_2) per layer, None for layer 1 (whose values are V_1)."""
    attns = [m for m in model.modules() if isinstance(m, ValueResidualAttention)]
    if not attns:
        return None
    return [None if a.first else [float(a.lambda1), float(a.lambda2)] for a in attns]


def low_rank_ratios(captured, mask) -> list | None:
    """LAuReL: mean |B A x| / mean |x| over tokens, per sub-layer."""
    paths = [(m, x) for m, x in captured if isinstance(m, LowRank)]
    if not paths:
        return None
    out = []
    for m, x in paths:
        x = _tokens(x.float(), mask, 0)
        out.append((m(x).norm(dim=-1).mean() / x.norm(dim=-1).mean()).item())
    return out


@torch.no_grad()
def stream_measures(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict:
    """Every measurement of this module on `model` (eval mode) and one batch; the absent ones are left out."""
    was = model.training
    model.eval()
    cap = Capture(model, (HyperConnection, ManifoldHyperConnection, DepthAttention, LowRank, MultiHeadAttention))
    try:
        out = model(input_ids, attention_mask=attention_mask, output_hidden_states=True)
        captured = list(cap.inputs)
        mask = attention_mask
        result = {
            "hidden_sq_norm": hidden_sq_norms(out.hidden_states, attention_mask),
            "mixing": mixing(captured, mask),
            "depth_weights": attn_res_weights(model, captured, mask)
            if any(isinstance(b, AttnRes) for b in model.blocks)
            else denseformer_weights(model),
            "value_lambdas": value_lambdas(model),
            "low_rank_ratio": low_rank_ratios(captured, mask),
            "attention": attention_measures(captured, mask),
        }
    finally:
        cap.remove()
        model.train(was)
    return {k: v for k, v in result.items() if v is not None}
