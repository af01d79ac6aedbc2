"""The claims of the papers that answered Xiong et al. (SPEC 2c), judged from a sweep's verdicts and its final runs'
probes by rules fixed before the runs (SPEC 10: never one figure or one seed). `hi(G)` is the top of group G's
trainable range (every tuning seed completed and scored at least `tolerance` better than the cap), -inf where it
has none; "no warm-up" and "warm-up" are a block's two groups of one experiment.

- Admin, T-Fixup, ResiDual, HybridNorm: each removes Post-LN's need for warm-up (Admin and ResiDual keeping
  Post-LN's form). `holds` when without warm-up the block is trainable as high as Pre-LN without warm-up, hi(A) >=
  hi(Pre-LN), and its best score without warm-up is within `tolerance` of its best with it; `does not hold` when
  without warm-up it is trainable no higher than Post-LN without warm-up, or its score without warm-up is worse
  than with it by more than `tolerance`; else `inconclusive`. Also `inconclusive` where the problem did not
  appear (Post-LN without warm-up trainable as high as Pre-LN without it: Xiong's effect absent on this grid).
- Derf and DyT: each performs as well as the norm it replaces (Pre-LN's). He & Hofmann's rule against Pre-LN in
  the same warm-up arm: `holds` when the upper end of the Welch interval is below +tolerance, `does not hold`
  when `worse`, else `inconclusive`.
- Gated attention: larger usable learning rates. `holds` when the gated Pre-LN is trainable at least as high
  as Pre-LN in both warm-up arms and higher in one; `does not hold` when lower in either; else `inconclusive`.
  And no attention sink: from the stream probes after training, each final seed's first-token attention mass
  (the mean over layers and heads); `holds` when the gated group's is lower than Pre-LN's (same arm, Welch
  p < 0.05), `does not hold` when higher (p < 0.05), `inconclusive` otherwise or where Pre-LN's mass is within
  `SINK_MARGIN` of the evenly spread level (no sink formed to remove).
Every rule reads `inconclusive` where a group it reads failed (scored the cap) or had its best rate at the grid's edge.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from blocklab import stats
from blocklab.experiments.claims import per_step, resolved_configs, unusable
from blocklab.training.rundir import STREAM_PROBES

WARMUP_FREE = {
    "admin": ("Liu et al. (2020)", "Admin"),
    "t-fixup": ("Huang et al. (2020)", "T-Fixup"),
    "resi-dual": ("Xie et al. (2023)", "ResiDual"),
    "hybridnorm": ("Zhuo et al. (2025)", "HybridNorm"),
}
NORM_FREE = {"derf": ("Chen et al. (2025)", "Derf"), "dyt": ("Zhu et al. (2025)", "DyT")}
GATE = "Qiu et al. (2025)"
SINK_MARGIN = 0.05  # first-token mass within this of the evenly spread level: no sink to remove


def answer_kind(model) -> str:
    """The answer a group's model config is: 'gate' or the pointwise norm on Pre-LN, else the block's name."""
    if model.block == "pre-ln" and model.attn_gate is not False:
        return "gate"
    if model.block == "pre-ln" and model.norm in NORM_FREE:
        return model.norm
    return model.block


def arms(sweep, exp) -> dict[tuple[str, bool], str]:
    """{(answer kind, with warm-up): group} of experiment `exp`; the first group of each pair is kept."""
    out: dict[tuple[str, bool], str] = {}
    for name, cfg in resolved_configs(sweep, exp).items():
        out.setdefault((answer_kind(cfg.model), cfg.train.warmup_steps > 0), name)
    return out


def hi(group: dict) -> float:
    r = group.get("trainable")
    return -math.inf if r is None else r[1]


def _range_text(group: dict) -> str:
    r = group.get("trainable")
    return f"{group['label']} {'none' if r is None else f'{r[0]:g}..{r[1]:g}'}"


def _claim(paper: str, exp: str, group: str, claim: str, status: str, why: str) -> dict:
    return {"paper": paper, "experiment": exp, "group": group, "claim": claim, "status": status, "why": why}


def warmup_free_claim(exp, result, pair, post0, pre0, kind) -> dict:
    paper, label = WARMUP_FREE[kind]
    a0, a = pair
    G = result["groups"]
    claim = f"{label} trains without warm-up: as high a learning rate as Pre-LN, no loss against its own warm-up"
    ranges = ", ".join(_range_text(G[n]) for n in (a0, a, post0, pre0))
    tol = result["tolerance"]
    bad = unusable(result, [a0, a, post0, pre0])
    if bad:
        why = f"failed or best rate at the grid's edge: {', '.join(bad)}. Trainable ranges: {ranges}."
        return _claim(paper, exp, a0, claim, "inconclusive", why)
    gap = G[a0]["mean"] - G[a]["mean"]
    low, worse = hi(G[a0]) <= hi(G[post0]), gap > tol
    if hi(G[post0]) >= hi(G[pre0]):
        status, verdict = "inconclusive", "Post-LN without warm-up trained as high as Pre-LN: no instability to remove"
    elif low or worse:
        said = ["its range ends no higher than Post-LN's without warm-up"] if low else []
        status, verdict = "does not hold", " and ".join(said + (["it is worse than with warm-up"] if worse else []))
    elif hi(G[a0]) >= hi(G[pre0]):
        status, verdict = "holds", "as high as Pre-LN without warm-up and within tolerance of its warm-up score"
    else:
        status, verdict = "inconclusive", "above Post-LN's range, below Pre-LN's"
    why = (
        f"trainable ranges: {ranges}; {label}'s best without warm-up {G[a0]['mean']:.3f} against {G[a]['mean']:.3f} "
        f"with it ({gap:+.3f}, tolerance {tol:g}): {verdict}."
    )
    return _claim(paper, exp, a0, claim, status, why)


def norm_free_claim(exp, result, name, ref, kind) -> dict:
    paper, label = NORM_FREE[kind]
    G, c = result["groups"], result["comparisons"].get(name, {})
    claim = f"{label} in place of the norm does as well as Pre-LN's LayerNorm"
    status, early = per_step(result, ref, name)
    if early:
        return _claim(paper, exp, name, claim, status, early)
    tol = result["tolerance"]
    why = (
        f"against {G[ref]['label']}: difference {c['difference']:+.3f}, 95% interval {c['ci95'][0]:+.3f}.."
        f"{c['ci95'][1]:+.3f}, corrected p = {c['p_holm']:.2g}, {c['verdict']}; tolerance +{tol:g}; trainable "
        f"ranges {_range_text(G[name])}, {_range_text(G[ref])}."
    )
    return _claim(paper, exp, name, claim, status, why)


def gate_range_claim(exp, result, gates: list[str], pres: list[str]) -> dict:
    G = result["groups"]
    claim = "Gated attention tolerates larger learning rates than Pre-LN"
    ranges = "; ".join(f"{_range_text(G[g])} against {_range_text(G[p])}" for g, p in zip(gates, pres))
    bad = unusable(result, gates + pres)
    if bad:
        why = f"failed or best rate at the grid's edge: {', '.join(bad)}. Trainable ranges: {ranges}."
        return _claim(GATE, exp, gates[0], claim, "inconclusive", why)
    higher = [hi(G[g]) > hi(G[p]) for g, p in zip(gates, pres)]
    lower = [hi(G[g]) < hi(G[p]) for g, p in zip(gates, pres)]
    status = "does not hold" if any(lower) else "holds" if any(higher) else "inconclusive"
    return _claim(GATE, exp, gates[0], claim, status, f"trainable ranges: {ranges}.")


def sink_mass(run: Path) -> tuple[float, float] | None:
    """(first-token mass after training, the mean over layers and heads; the evenly spread level) of a run."""
    try:
        att = json.loads((run / STREAM_PROBES).read_text())["final"]["attention"]
        values = [v for heads in att["first_token_mass"] for v in heads]
        return sum(values) / len(values), float(att["uniform"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def gate_sink_claim(exp, result, gate: str, pre: str, runs: dict) -> dict:
    G = result["groups"]
    claim = "Gated attention removes the attention sink (less attention on the first token than Pre-LN's)"
    found = {n: [m for m in (sink_mass(r) for r in runs[n]) if m is not None] for n in (gate, pre)}
    if len(found[gate]) < 2 or len(found[pre]) < 2:
        return _claim(GATE, exp, gate, claim, "inconclusive", "fewer than two probed final runs a side.")
    a, b = ([m for m, _ in found[n]] for n in (gate, pre))
    level = found[pre][0][1]
    w = stats.welch(a, b)
    text = (
        f"first-token mass after training (mean over layers and heads), per seed: {G[gate]['label']} "
        f"{', '.join(f'{v:.3f}' for v in a)}; {G[pre]['label']} {', '.join(f'{v:.3f}' for v in b)}; difference "
        f"{w['difference']:+.3f} [{w['ci95'][0]:+.3f}, {w['ci95'][1]:+.3f}], p = {w['p']:.2g} (Welch); attention "
        f"spread evenly would put {level:.3f} there"
    )
    if sum(b) / len(b) - level < SINK_MARGIN:
        return _claim(GATE, exp, gate, claim, "inconclusive", text + ": Pre-LN formed no sink to remove.")
    status = "inconclusive" if w["p"] >= 0.05 else "holds" if w["difference"] < 0 else "does not hold"
    return _claim(GATE, exp, gate, claim, status, text + ".")


def answers_claims(experiments: dict, sweep, out: Path, finals) -> list[dict]:
    """The claims above for every experiment holding Post-LN and Pre-LN with and without warm-up."""
    claims = []
    for exp, result in experiments.items():
        if result["tuned"] != "train.lr":
            continue
        found = arms(sweep, exp)
        post0, pre0, pre = found.get(("post-ln", False)), found.get(("pre-ln", False)), found.get(("pre-ln", True))
        if None in (post0, pre0, pre):
            continue
        largest = sweep.size_indices()[-1]
        runs = {
            n: [Path(out) / "runs" / r.name for r in finals if r.group == (n if largest is None else f"{n}_z{largest}")]
            for n in found.values()
        }
        for kind in WARMUP_FREE:
            pair = found.get((kind, False)), found.get((kind, True))
            if None not in pair:
                claims.append(warmup_free_claim(exp, result, pair, post0, pre0, kind))
        for kind in NORM_FREE:  # against the reference, with its comparisons: Pre-LN with warm-up
            if (name := found.get((kind, True))) is not None and result["reference"] == pre:
                claims.append(norm_free_claim(exp, result, name, pre, kind))
        gates = [(found[("gate", w)], p) for w, p in ((True, pre), (False, pre0)) if ("gate", w) in found]
        if gates:
            claims.append(gate_range_claim(exp, result, [g for g, _ in gates], [p for _, p in gates]))
            claims.append(gate_sink_claim(exp, result, gates[0][0], gates[0][1], runs))
    return claims
