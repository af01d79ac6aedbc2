"""Every trainable gain of a model, as flat stable keys, and their trajectories as a figure.

Keys (`l` is the block index, `h` the head):

    L{l}.alpha.h{h}  L{l}.beta.h{h}  L{l}.gamma.h{h}    shaped attention (v-skipinit: no gamma)
    L{l}.beta_ff     L{l}.beta_sa                       block-level scalars
    L{l}.alpha_v     L{l}.beta_v     L{l}.beta_v_over_alpha_v   shaped-vp's W^V = alpha_V I + beta_V dW
    L{l}.alpha_p     L{l}.beta_p     L{l}.beta_p_over_alpha_p   shaped-vp's W^P
    L{l}.alpha       ReZero's a
    L{l}.alpha_a     L{l}.alpha_m    L{l}.s_qk    L{l}.s_uv     nGPT's scalings, mean over the vector as used
    L{l}.dyt_a{i}    the alpha of the block's i-th DyT (norm="dyt")
    L{l}.derf_a{i}   L{l}.derf_s{i}                     the alpha and the shift of the block's i-th Derf (norm="derf")
    L{l}.omega{k}    Admin's omega of the block's k-th sub-layer, the mean over its d channels

The model is read through `named_parameters()` and `named_modules()`: any model whose blocks sit in a
`ModuleList` called `blocks` and use blocklab's parameter names works.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import torch.nn as nn

from blocklab.layers import Derf, DyT, Scale
from blocklab.model import gathered

GAIN_NAMES = ("alpha", "beta", "gamma", "beta_ff", "beta_sa")
_BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.(.+)$")
_SUFFIX = {"value": "_v", "proj": "_p"}  # the IdentityPlus owning the gain -> key suffix
_KEY = re.compile(r"^L(\d+)\.([A-Za-z0-9_]+)(?:\.h(\d+))?$")
_OMEGA = re.compile(r"^omegas\.(\d+)$")  # Admin's ParameterList (blocks/admin.py)


def _gain_kind(rest: str) -> str | None:
    """'attn.alpha' -> 'alpha'; 'attn.value.beta' -> 'beta_v'; 'beta_ff' -> 'beta_ff'; else None."""
    parts = rest.split(".")
    name = parts[-1]
    if name not in GAIN_NAMES:
        return None
    if len(parts) >= 2 and parts[-2] in _SUFFIX:
        return name + _SUFFIX[parts[-2]]
    return name


def gain_values(model: nn.Module) -> dict[str, float]:
    """{key: value} for every gain of `model` (see the module docstring), ordered by layer.

    Per-head gains get one key per head; shaped-vp adds the ratios beta_V / alpha_V and
    beta_P / alpha_P (NaN when alpha is exactly 0).
    """
    found: dict[tuple[int, str], list[float]] = {}
    for name, p in model.named_parameters():
        m = _BLOCK.search(name)
        if m is None:
            continue
        omega = _OMEGA.match(m.group(2))
        if omega is not None:  # a d-vector: its mean, as the block's skip weight in one number
            found[(int(m.group(1)), f"omega{omega.group(1)}")] = [gathered(p.detach()).float().mean().item()]
            continue
        kind = _gain_kind(m.group(2))
        if kind is None or p.numel() == 0:
            continue
        found[(int(m.group(1)), kind)] = gathered(p.detach()).float().flatten().cpu().tolist()
    out: dict[str, float] = {}
    for layer, kind in sorted(found, key=lambda k: (k[0], _order(k[1]))):
        values = found[(layer, kind)]
        if len(values) == 1:
            out[f"L{layer}.{kind}"] = values[0]
        else:
            for h, v in enumerate(values):
                out[f"L{layer}.{kind}.h{h}"] = v
    out.update(_module_gains(model))
    for layer in sorted({k[0] for k in found}):
        for s in ("v", "p"):
            a, b = out.get(f"L{layer}.alpha_{s}"), out.get(f"L{layer}.beta_{s}")
            if a is not None and b is not None:
                out[f"L{layer}.beta_{s}_over_alpha_{s}"] = b / a if a != 0 else math.nan
    return out


def _module_gains(model: nn.Module) -> dict[str, float]:
    """Gains that live in modules rather than as named scalars: nGPT's stored scalings (blocks/ngpt.py),
    as the mean over the vector of what the block uses (|alpha| for the eigen learning rates), and each
    DyT's alpha (layers.DyT, `dyt_a{i}` for the i-th DyT of the block) and each Derf's alpha and shift
    (layers.Derf, `derf_a{i}`, `derf_s{i}`)."""
    out: dict[str, float] = {}
    dyt: dict[int, int] = defaultdict(int)
    derf: dict[int, int] = defaultdict(int)
    for name, m in model.named_modules():
        hit = _BLOCK.search(name)
        if hit is None:
            continue
        layer, kind = int(hit.group(1)), hit.group(2).split(".")[-1]
        if isinstance(m, Scale):
            used = gathered(m().detach()).float()
            out[f"L{layer}.{kind}"] = (used.abs() if kind.startswith("alpha") else used).mean().item()
        elif isinstance(m, DyT):
            out[f"L{layer}.dyt_a{dyt[layer]}"] = gathered(m.a.detach()).float().item()
            dyt[layer] += 1
        elif isinstance(m, Derf):
            i = derf[layer]
            out[f"L{layer}.derf_a{i}"] = gathered(m.a.detach()).float().item()
            out[f"L{layer}.derf_s{i}"] = gathered(m.s.detach()).float().item()
            derf[layer] += 1
    return out


def _order(kind: str) -> tuple:
    base = ("alpha", "beta", "gamma", "beta_ff", "beta_sa", "alpha_v", "beta_v", "alpha_p", "beta_p")
    return (base.index(kind) if kind in base else len(base), kind)


def parse_key(key: str) -> tuple[int, str, int | None] | None:
    """'L3.alpha.h1' -> (3, 'alpha', 1); 'L2.beta_ff' -> (2, 'beta_ff', None); else None."""
    m = _KEY.match(key)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), (int(m.group(3)) if m.group(3) is not None else None)


def gain_trajectories(records, prefix: str = "gain/") -> dict[str, dict[tuple[int, int | None], tuple[list, list]]]:
    """{kind: {(layer, head): (steps, values)}} from metrics.jsonl records (dicts with `step`)."""
    out: dict = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for rec in records:
        step = rec.get("step")
        if step is None:
            continue
        for k, v in rec.items():
            if not k.startswith(prefix) or v is None:
                continue
            parsed = parse_key(k[len(prefix) :])
            if parsed is None:
                continue
            layer, kind, head = parsed
            steps, values = out[kind][(layer, head)]
            steps.append(step)
            values.append(float(v))
    return {k: dict(v) for k, v in out.items()}


def plot_gains(records, path, prefix: str = "gain/", title: str | None = None) -> str | None:
    """Plot every gain against the training step: one subplot per gain kind, layers coloured.

    `records` are metrics.jsonl dicts holding `step` and `gain/<key>` entries. Writes a PNG
    to `path` and returns it, or returns None (writing nothing) when there is no gain.
    """
    traj = gain_trajectories(records, prefix)
    if not traj:
        return None
    from matplotlib import cm, colormaps, colors

    from blocklab.probes.plots import new_figure, save_figure

    kinds = sorted(traj, key=_order)
    n_layers = 1 + max(layer for series in traj.values() for layer, _ in series)
    cmap, norm = colormaps["viridis"], colors.Normalize(vmin=0, vmax=max(n_layers - 1, 1))
    ncols = min(3, len(kinds))
    nrows = math.ceil(len(kinds) / ncols)
    fig, axes = new_figure(nrows, ncols, (4.6 * ncols, 3.4 * nrows))
    for ax, kind in zip(axes.flat, kinds):
        labelled = set()
        for (layer, head), (steps, values) in sorted(traj[kind].items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            label = f"layer {layer}" if layer not in labelled else None
            labelled.add(layer)
            ax.plot(steps, values, color=cmap(norm(layer)), lw=1.0 if head is None else 0.7, label=label)
        ax.set_title(kind + (" (per head)" if any(h is not None for _, h in traj[kind]) else ""))
        ax.set_xlabel("training step")
        ax.set_ylabel(kind)
        ax.grid(alpha=0.3)
        if kind.endswith("_over_alpha_v") or kind.endswith("_over_alpha_p"):
            ax.axhline(0.0, color="grey", ls="--", lw=0.8, label="0 (He & Hofmann: ratio -> 0)")
        if n_layers <= 12:
            ax.legend(fontsize=7, ncol=2)
    for ax in list(axes.flat)[len(kinds) :]:
        ax.axis("off")
    if n_layers > 12:
        fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes.ravel().tolist(), label="layer")
    fig.suptitle(title or "Gains during training")
    return save_figure(fig, path, tight=n_layers <= 12)
