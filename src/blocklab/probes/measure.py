"""Signal-propagation measurements on one model and one batch, through the public model API only.

A model qualifies if `model(input_ids, attention_mask=..., labels=..., output_hidden_states=True)`
returns `.loss` and `.hidden_states` (the embedding output, then each block's output) and
its blocks sit in a `ModuleList` named `blocks` whose weight matrices are `nn.Linear`.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn as nn

_BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.(.+)$")


def weight_role(rest: str) -> str:
    """Canonical role of a Linear inside a block: 'attn.q', 'attn.k', 'attn.v', 'attn.proj', 'mlp.fc1', 'mlp.fc2'.

    The trainable part `dW` of an `I + dW` matrix takes the role of the matrix (SAS's first
    W^V, shaped-vp's W^V and W^P); `attn.value` (v-skipinit) is `attn.v`.
    """
    if rest.endswith(".dW"):
        rest = rest[: -len(".dW")]
    if rest == "attn.value":
        rest = "attn.v"
    return rest


def block_linears(model: nn.Module) -> dict[int, dict[str, nn.Linear]]:
    """{block index: {role: Linear}} from `named_modules()`."""
    out: dict[int, dict[str, nn.Linear]] = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            hit = _BLOCK.search(name)
            if hit:
                out.setdefault(int(hit.group(1)), {})[weight_role(hit.group(2))] = m
    return out


def _token_mask(h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    if attention_mask is None:
        return torch.ones(h.shape[:2], dtype=h.dtype, device=h.device)
    return attention_mask.to(device=h.device, dtype=h.dtype)


@torch.no_grad()
def hidden_sq_norms(hidden_states, attention_mask=None) -> list[float]:
    """Mean over (real) tokens of |x_l|^2, for each hidden state l = 0..L."""
    out = []
    for h in hidden_states:
        h = h.float()
        m = _token_mask(h, attention_mask)
        out.append(((h.pow(2).sum(-1) * m).sum() / m.sum()).item())
    return out


@torch.no_grad()
def cosine_similarities(hidden_states, attention_mask=None) -> list[float]:
    """Mean pairwise cosine similarity between the token vectors of a sequence, self-pairs
    excluded, averaged over the sequences (with >= 2 real tokens), for each hidden state.

    Uses sum_{i != j} <u_i, u_j> = |sum_i u_i|^2 - sum_i |u_i|^2 for unit vectors u, so it
    never forms the T x T matrix.
    """
    out = []
    for h in hidden_states:
        h = h.float()
        m = _token_mask(h, attention_mask)
        u = torch.nn.functional.normalize(h, dim=-1) * m[..., None]
        n = m.sum(-1)
        pair_sum = u.sum(1).pow(2).sum(-1) - u.pow(2).sum((1, 2))
        ok = n >= 2
        cos = pair_sum[ok] / (n[ok] * (n[ok] - 1))
        out.append(cos.mean().item() if ok.any() else math.nan)
    return out


# DeepNet's model update (Wang et al. 2022, Sec. 4.1 and Fig. 3): how far the output moves after the first
# Adam step. Adam's first step is lr * sign(g) on every parameter, whatever the gradient's scale.
UPDATE_LR = 1e-3


@torch.no_grad()
def model_update(model: nn.Module, input_ids, attention_mask, logits: torch.Tensor, lr: float = UPDATE_LR) -> float:
    """RMS over tokens and vocabulary of the logits' change after one first Adam step of `lr` (the gradients
    must be in .grad), followed as in training by the model's after_optimizer_step (nGPT's return to the
    sphere). The parameters, the mode and the random state are put back exactly; `logits` must come from
    a forward without dropout (the probes build models with none)."""
    saved = {p: p.detach().clone() for p in model.parameters()}
    for p in saved:
        if p.grad is not None:
            p.sub_(lr * p.grad.sign())
    if hasattr(model, "after_optimizer_step"):
        model.after_optimizer_step()
    was_training = model.training
    try:
        with torch.random.fork_rng(devices=[]):
            moved = model.eval()(input_ids, attention_mask=attention_mask).logits
        return (moved.float() - logits.float()).pow(2).mean().sqrt().item()
    finally:
        model.train(was_training)
        for p, v in saved.items():
            p.copy_(v)


def probe_batch(model: nn.Module, input_ids, labels, attention_mask=None) -> dict:
    """One forward and backward pass: hidden norms, cosine similarities, gradient norms, loss.

    Leaves the model's gradients as it found them (set to None).
    """
    device = next(model.parameters()).device
    input_ids, labels = input_ids.to(device), labels.to(device)
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
    model.zero_grad(set_to_none=True)
    out = model(input_ids, attention_mask=attention_mask, labels=labels, output_hidden_states=True)
    if out.hidden_states is None:
        raise ValueError("the model returned no hidden_states for output_hidden_states=True")
    out.loss.backward()
    hs = [h.detach() for h in out.hidden_states]
    n_layers = len(hs) - 1
    linears = block_linears(model)
    roles = sorted({r for layer in linears.values() for r in layer})
    grad = {r: [None] * n_layers for r in roles}
    for layer, mods in linears.items():
        if layer >= n_layers:
            continue
        for role, lin in mods.items():
            g = lin.weight.grad
            grad[role][layer] = g.float().norm().item() if g is not None else 0.0
    last = linears.get(n_layers - 1, {}).get("mlp.fc2")
    result = {
        "loss": out.loss.item(),
        "hidden_sq_norm": hidden_sq_norms(hs, attention_mask),
        "cosine_similarity": cosine_similarities(hs, attention_mask),
        "grad_norm": grad,
        "last_ffn_grad_norm": (
            last.weight.grad.float().norm().item() if last is not None and last.weight.grad is not None else None
        ),
        "model_update": model_update(model, input_ids, attention_mask, out.logits.detach()),
    }
    model.zero_grad(set_to_none=True)
    return result


def _mean_std(values: list) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return None, None
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return mean, std


def _agg_lists(lists: list[list]) -> dict:
    cols = list(zip(*lists))
    stats = [_mean_std(list(c)) for c in cols]
    return {"mean": [m for m, _ in stats], "std": [s for _, s in stats]}


def aggregate(samples: list[dict]) -> dict:
    """Mean and sample std over `probe_batch` results (seeds x batches), field by field."""
    roles = sorted({r for s in samples for r in s["grad_norm"]})
    n_layers = len(samples[0]["hidden_sq_norm"]) - 1
    loss_m, loss_s = _mean_std([s["loss"] for s in samples])
    last_m, last_s = _mean_std([s["last_ffn_grad_norm"] for s in samples])
    upd_m, upd_s = _mean_std([s.get("model_update") for s in samples])
    return {
        "n_layers": n_layers,
        "n_samples": len(samples),
        "loss": {"mean": loss_m, "std": loss_s},
        "hidden_sq_norm": _agg_lists([s["hidden_sq_norm"] for s in samples]),
        "cosine_similarity": _agg_lists([s["cosine_similarity"] for s in samples]),
        "grad_norm": {r: _agg_lists([s["grad_norm"].get(r, [None] * n_layers) for s in samples]) for r in roles},
        "last_ffn_grad_norm": {"mean": last_m, "std": last_s},
        "model_update": {"mean": upd_m, "std": upd_s},
    }


def probe_model(model: nn.Module, batches) -> dict:
    """`probe_batch` over an iterable of (input_ids, labels[, attention_mask]) batches, aggregated."""
    samples = [probe_batch(model, *b) for b in batches]
    if not samples:
        raise ValueError("no batches to probe")
    return aggregate(samples)
