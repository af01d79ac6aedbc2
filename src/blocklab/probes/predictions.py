"""What the papers predict at initialisation, as plain functions of the configuration.

Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture":

- Lemma 2: with Xavier init, unit-gain LayerNorm, ReLU, `d x d` weights and
  `E|x_0|^2 = d`, a Pre-LN model has `(1 + l/2) d <= E|x_l|^2 <= (1 + 3l/2) d` after
  `l` blocks. The argument: every sub-layer adds its own output's squared norm (the
  cross term vanishes in expectation over the zero-mean output weight); the FFN adds
  exactly `d/2` (ReLU halves `E|W1 y|^2 = d`), the attention between `0` (uniform
  averaging of many independent tokens) and `d` (attention to one token).
  `hidden_norm_constants` redoes that argument with the actual weight variances and
  `d_ff`, which gives the same bounds for the paper's assumptions and the correct ones
  for `d_ff = 4d` (FFN adds `0.32 d`, not `d/2`) or blocklab's `normal` init.
- Post-LN ends each block with a unit-gain Norm, so `|x_l|^2 = d` (up to `eps`) for
  every `l >= 1`, whatever the weights.
- Lemma 3: the Jacobian of a unit-gain LayerNorm has spectral norm `sqrt(d) / |x - mean(x)|`.
- Theorem 1: the gradient of the last FFN's output weight is `O(d sqrt(ln d))` for
  Post-LN (constant in depth) and `O(d sqrt(ln d / L))` for Pre-LN (log-log slope -1/2).

He & Hofmann (2024): shaped attention is the identity at init, so `sas` maps `x` to
`Norm(x) + beta_FF MLP(Norm(Norm(x)))` and `sas-p` to `beta_SA Norm(x) + beta_FF MLP(Norm(x))`;
the same variance argument then gives their hidden norms exactly (in expectation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from blocklab.blocks import REGISTRY
from blocklab.layers import POINTWISE_NORMS
from blocklab.registry import NORM_FREE_LAWS


class _LastFFNSlopes(Mapping):
    """{block: (slope, source)}: Theorem 1's log-log slope of the last FFN output weight's gradient norm
    against depth, for every registered block whose spec predicts one (read live from the registry)."""

    def _table(self) -> dict:
        return {
            b: (s.predictions.last_ffn_slope, s.predictions.last_ffn_source)
            for b, s in REGISTRY.items()
            if s.predictions.last_ffn_slope is not None
        }

    def __getitem__(self, block):
        return self._table()[block]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


LAST_FFN_SLOPE = _LastFFNSlopes()


def lemma2_bounds(l: int, d: int) -> tuple[float, float]:
    """Xiong et al. Lemma 2 for Pre-LN, literally: ((1 + l/2) d, (1 + 3l/2) d)."""
    return (1 + l / 2) * d, (1 + 3 * l / 2) * d


def post_ln_norm(d: int) -> float:
    """Post-LN (unit-gain LayerNorm or RMSNorm after each block): E|x_l|^2 = d for l >= 1."""
    return float(d)


def layernorm_jacobian_norm(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Xiong et al. Lemma 3: spectral norm of the Jacobian of a unit-gain LayerNorm at `x`.

    `sqrt(d) / |x - mean(x)|` for `eps = 0`; with `eps` (as in `torch.nn.LayerNorm`)
    the exact value is `sqrt(d) / sqrt(|x - mean(x)|^2 + d eps)` (for d >= 3). Works on
    the last dimension of any tensor.
    """
    d = x.shape[-1]
    centred = x - x.mean(-1, keepdim=True)
    return math.sqrt(d) / (centred.pow(2).sum(-1) + d * eps).sqrt()


def rmsnorm_jacobian_norm(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """The RMSNorm analogue of Lemma 3: `sqrt(d) / sqrt(|x|^2 + d eps)`."""
    d = x.shape[-1]
    return math.sqrt(d) / (x.pow(2).sum(-1) + d * eps).sqrt()


def weight_variance(init: str, fan_in: int, fan_out: int) -> float:
    """Per-entry variance of a weight matrix under blocklab's inits (docs/models.md#initialisation)."""
    return 0.02**2 if init == "normal" else 2.0 / (fan_in + fan_out)


def hidden_norm_constants(cfg) -> dict:
    """The constants of Lemma 2's argument for a ModelConfig, in units of d.

    `x0`: E|x_0|^2 / d (token plus learned position embedding); `ffn`: E|MLP(y)|^2 / d for
    |y|^2 = d; `attn`: the largest E|MHA(y)|^2 / d (attention on one token). For Xiong's
    assumptions (Xavier, d_ff = d, no position embedding) these are 1, 1/2 and 1.
    """
    d, f = cfg.d_model, cfg.d_ff
    if cfg.init == "normal":
        x0 = 0.02**2 * (2 if cfg.positions == "learned" else 1)
        x0 += 0.5 if cfg.positions == "sinusoidal" else 0.0  # |sinusoid|^2 = d/2
    else:
        x0 = 1.0 + (1.0 / d if cfg.positions == "learned" else 0.5)
    if REGISTRY[cfg.block].sphere:  # nGPT: unit token rows (times embed_scale, sqrt(d) under xavier)
        x0 += (1.0 / d - 0.02**2) if cfg.init == "normal" else 0.0
    v1, v2 = weight_variance(cfg.init, d, f), weight_variance(cfg.init, f, d)
    # |W1 y|^2 = f d v1; ReLU keeps half in expectation (GELU: about 0.43; ReLU is the papers' case).
    act = 0.5 if cfg.activation == "relu" else 0.425
    ffn = f * v1 * act * d * v2
    vd = weight_variance(cfg.init, d, d) * d
    attn = vd * vd
    return {"x0": x0, "ffn": ffn, "attn": attn, "eps": cfg.norm_eps}


# One block's step of E|x_l|^2 at init, per law of blocks.HIDDEN_NORM_LAWS: (lower, upper) of block l
# from those of block l - 1. `first`: l = 1; `c`: hidden_norm_constants; `ff`, `sa`: beta_FF, beta_SA.
def _residual(lo, hi, first, d, c, ff, sa):  # Lemma 2: the MLP adds its variance, attention 0 .. its own
    return lo + c["ffn"] * d, hi + (c["ffn"] + c["attn"]) * d


def _unit(lo, hi, first, d, c, ff, sa):
    return post_ln_norm(d), post_ln_norm(d)


def _identity_attention(lo, hi, first, d, c, ff, sa):  # u = Norm(x), then u + beta_FF MLP(Norm(u))
    v = d * (1 + ff**2 * c["ffn"])
    return v, v


def _no_skip(lo, hi, first, d, c, ff, sa):  # beta_SA Norm(x) + beta_FF MLP(Norm(x))
    v = d * (sa**2 + ff**2 * c["ffn"])
    return v, v


def _no_skip_no_norm(lo, hi, first, d, c, ff, sa):  # no norm after the first block: the gain multiplies
    if first:
        return _no_skip(lo, hi, first, d, c, ff, sa)
    g = sa**2 + ff**2 * c["ffn"]
    return lo * g, hi * g


def _value_projection(lo, hi, first, d, c, ff, sa):  # attention = W^P W^V Norm(x) at init (alpha=1, beta=0)
    v = d * (c["attn"] + ff**2 * c["ffn"])
    return v, v


def _softmax_no_skip(lo, hi, first, d, c, ff, sa):  # u = A Norm(x): |u|^2 between 0 and d
    return d * ff**2 * c["ffn"], d * (1 + ff**2 * c["ffn"])


def _identity(lo, hi, first, d, c, ff, sa):  # ReZero: a = 0, every block returns its input
    return lo, hi


def _settled(m, c):
    """|Norm(y)|^2 / d for a sub-layer output y of mean square m per entry: below 1 where eps matters."""
    return m / (m + c["eps"])


def _peri(lo, hi, first, d, c, ff, sa):  # x + Norm(F(Norm(x))), the first block normalising its input
    lo, hi = (d, d) if first else (lo, hi)  # the cross term vanishes: Norm(F) is odd in F's output weight
    return lo + d * _settled(c["ffn"], c), hi + d * (_settled(c["ffn"], c) + _settled(c["attn"], c))


def _sphere(lo, hi, first, d, c, ff, sa):  # nGPT: every block ends with an L2 normalisation
    return 1.0, 1.0


LAWS = {
    "identity": _identity,
    "peri": _peri,
    "sphere": _sphere,
    "residual": _residual,
    "unit": _unit,
    "identity-attention": _identity_attention,
    "no-skip": _no_skip,
    "no-skip-no-norm": _no_skip_no_norm,
    "value-projection": _value_projection,
    "softmax-no-skip": _softmax_no_skip,
}


def hidden_norm_prediction(cfg, n_layers: int) -> dict | None:
    """Predicted E|x_l|^2 for l = 0..n_layers (lists `lower`, `upper`, in absolute units).

    Returns None for a block no paper covers (its spec's `predictions.hidden_norm` is None).
    `lower == upper` where the prediction is exact.
    """
    d, spec = cfg.d_model, REGISTRY[cfg.block]
    pred = spec.predictions
    if pred.hidden_norm is None or (cfg.norm in POINTWISE_NORMS and pred.hidden_norm not in NORM_FREE_LAWS):
        return None  # the laws below assume unit-gain norms; none covers a tanh (erf) in their place
    step = LAWS[pred.hidden_norm]
    c = hidden_norm_constants(cfg)
    ff = cfg.resolved("beta_ff") if spec.beta_ff is not None else None
    sa = cfg.resolved("beta_sa") if spec.beta_sa is not None else None
    x0 = c["x0"] * d
    lo, hi = [x0], [x0]
    for _ in range(n_layers):
        a, b = step(lo[-1], hi[-1], len(lo) == 1, d, c, ff, sa)
        lo.append(a), hi.append(b)
    out = {"lower": lo, "upper": hi, "source": pred.hidden_norm_source, "constants": c}
    if pred.lemma2_paper:
        pl = [lemma2_bounds(l, d) for l in range(n_layers + 1)]
        out["lemma2_paper"] = {
            "lower": [a for a, _ in pl],
            "upper": [b for _, b in pl],
            "source": "Xiong et al. Lemma 2 as published (Xavier, d_ff = d): (1 + l/2) d .. (1 + 3l/2) d",
        }
    return out


def last_ffn_reference(block: str, depths, grads) -> dict | None:
    """Theorem 1's reference line for `block`, anchored by least squares with the slope fixed.

    Theorem 1 gives orders, not constants, so the line goes through the geometric mean of
    the measurements (`grad = exp(intercept) * L**slope`). None where no paper predicts a slope.
    """
    if block not in LAST_FFN_SLOPE or len(depths) == 0:
        return None
    slope, source = LAST_FFN_SLOPE[block]
    logs = [math.log(g) - slope * math.log(L) for L, g in zip(depths, grads) if g and g > 0]
    if not logs:
        return None
    intercept = sum(logs) / len(logs)
    return {
        "slope": slope,
        "intercept": intercept,
        "source": source,
        "values": [math.exp(intercept) * L**slope for L in depths],
    }


def fit_loglog(xs, ys) -> tuple[float | None, float | None]:
    """Least-squares slope and intercept of log(y) against log(x); (None, None) with < 2 points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y is not None and y > 0]
    if len(pts) < 2:
        return None, None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None, None
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return slope, my - slope * mx
