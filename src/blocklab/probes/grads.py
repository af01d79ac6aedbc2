"""Each layer's gradient norm per weight type, during training (docs/models.md#signal-propagation-probes;
Xiong et al. Fig. 3).

Keys: `L{l}.{role}` for the blocks in `model.blocks` (the roles of `measure.weight_role`: 'attn.q',
'attn.k', 'attn.v', 'attn.proj', 'mlp.fc1', 'mlp.fc2', and any other Linear a block has under its own
name) and `D{l}.{role}` for the decoder blocks of the translation model (`model.decoder_blocks`:
'self_attn.*', 'cross_attn.*', 'mlp.*'). The value is the Frobenius norm of that Linear weight's
`.grad`; weights without a gradient are left out.

The trainer calls this on the steps it logs only, after backward and the GradScaler's unscale and
before clipping, so the values are the true gradients of the update (under DDP, already averaged
over the ranks).
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn

from blocklab.model import gathered
from blocklab.probes.measure import block_linears, weight_role

_DECODER = re.compile(r"(?:^|\.)decoder_blocks\.(\d+)\.(.+)$")


def block_weights(model: nn.Module) -> dict[str, nn.Parameter]:
    """{key: Linear weight} for every block and role, ordered by stack, layer, then module order."""
    model = getattr(model, "module", model)  # DDP wraps the model in `.module`
    out = {
        f"L{layer}.{role}": lin.weight
        for layer, mods in sorted(block_linears(model).items())
        for role, lin in mods.items()
    }
    decoder: dict[int, dict[str, nn.Parameter]] = {}
    for name, m in model.named_modules():
        hit = _DECODER.search(name) if isinstance(m, nn.Linear) else None
        if hit:
            decoder.setdefault(int(hit.group(1)), {})[weight_role(hit.group(2))] = m.weight
    out.update({f"D{layer}.{role}": w for layer, ws in sorted(decoder.items()) for role, w in ws.items()})
    return out


@torch.no_grad()
def layer_grad_norms(model: nn.Module) -> dict[str, float]:
    """{`L{l}.{role}` / `D{l}.{role}`: Frobenius norm of the weight's gradient} (module docstring).

    One fused norm over all the gradients and one device sync (`.tolist()`), not one `.item()` per
    weight: on a GPU a hundred syncs would cost more than the step's logging.
    """
    keys, grads = [], []
    for key, w in block_weights(model).items():
        if w.grad is not None:
            keys.append(key)
            grads.append(w.grad)
    if not grads:
        return {}
    # One kernel per (device, dtype) group, accumulated in fp32 whatever the gradients' dtype.
    # Under FSDP each process holds its shards' norms: the global ones are gathered (every process calls).
    norms = gathered(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)))
    return dict(zip(keys, norms.tolist()))
