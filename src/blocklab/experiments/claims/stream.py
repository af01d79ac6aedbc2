"""The residual-stream papers' claims (docs/verdicts.md, "Claims"): Hyper-Connections' and Attention Residuals'
speed-ups, the composite gain that mHC bounds and Hyper-Connections does not, ResFormer's parameter saving.

Speed-ups are measured in steps to Pre-LN's final training loss (the mean over its completed seeds of a
trailing mean of logged losses at the last step), seed by seed: Pre-LN's steps on a seed over the block's on
the same seed. A run that never reaches the level counts its last step, a bound in the claim's favour on the
block's side and against it on Pre-LN's.
"""

from __future__ import annotations

import math

from blocklab import stats
from blocklab.experiments.claims.base import (
    HOLDS,
    INCONCLUSIVE,
    NOT,
    Context,
    Rule,
    by_facts,
    completed_seeds,
    facts,
    measure_test,
    non_inferior,
    non_inferiority,
    seeded,
)
from blocklab.experiments.claims.papers import params_text

HC = "Zhu et al. (2025)"
NORMFORMER = "Shleifer et al. (2021)"
MHC = "Xie et al. (2025)"
ATTN_RES = "Kimi Team (2026)"
RESFORMER = "Zhou et al. (2024)"
GAIN_BOUND = 2.0  # the nearest round bound above mHC's reported 1.6
SPEEDUPS = {
    "hyper-connections": (HC, 1.8, "1.8x faster convergence"),
    "attn-res": (ATTN_RES, 1.25, "a 1.25x compute advantage"),
    "normformer": (NORMFORMER, 1.22, "22-43% faster to the same perplexity"),
}


def _against_pre_ln(exp: dict, block: str) -> list[dict]:
    ref = exp["reference"]
    if facts(exp["groups"][ref]).get("block") != "pre-ln":
        return []
    return [{"group": n, "ref": ref} for n in by_facts(exp, block=block) if n != ref]


def _speedup_rule(block: str) -> Rule:
    paper, factor, text = SPEEDUPS[block]

    def judge(ctx: Context, b: dict) -> tuple[str, str, str]:
        name, ref = b["group"], b["ref"]
        claim = f"{ctx.label(name)}: {text} over Pre-LN"
        if ctx.failing(name) or ctx.test(name, ref).get("verdict") in ("fails", "fails more often"):
            return claim, NOT, f"{ctx.label(name)} {ctx.test(name, ref)['verdict']}."
        edge = ctx.edge(name, ref)
        if edge:
            return claim, INCONCLUSIVE, f"best at the grid's edge for {' and '.join(edge)}."
        steps = {n: (ctx.groups[n].get("measures") or {}).get("steps_to_reference") for n in (name, ref)}
        mine, theirs = seeded(steps[name]), seeded(steps[ref])
        common = sorted(set(mine) & set(theirs) & completed_seeds(ctx.groups[name]) & completed_seeds(ctx.groups[ref]))
        if len(common) < 2:
            return claim, INCONCLUSIVE, "fewer than two seeds with steps to Pre-LN's loss on both sides."
        logs = [math.log(theirs[s] / mine[s]) for s in common]
        level = 1 - stats.ALPHA / ctx.measure_family
        t = measure_test(logs, None, level)
        lo, hi = (math.exp(x) for x in t["ci"])
        ups = ", ".join(f"{theirs[s] / mine[s]:.2f}x" for s in common)
        why = (
            f"steps to Pre-LN's final training loss {steps[ref].get('level', float('nan')):.3f}, Pre-LN's over the "
            f"block's on each seed ({common}): {ups}; geometric mean {math.exp(t['mean']):.2f}x, {level:.1%} "
            f"interval {lo:.2f}x..{hi:.2f}x against the claimed {factor:g}x (a run that never reaches the level "
            "counts its last step)"
        )
        status = HOLDS if lo > factor else NOT if hi < factor else INCONCLUSIVE
        return claim, status, why + "."

    return Rule(
        key=f"speedup-{block}",
        paper=paper,
        statement=f"A {factor:g}x speed-up in steps to Pre-LN's final training loss, seed by seed: holds when the "
        f"lower end of the interval of the speed-up (geometric mean over seeds, level 1 - 0.05/k over the sweep's "
        f"k speed-up claims) is above {factor:g}; does not hold when its upper end is below {factor:g} or the block "
        "fails; inconclusive otherwise (a best at the grid's edge included).",
        find=lambda exp: _against_pre_ln(exp, block),
        judge=judge,
        measure="steps_to_reference",
    )


def _gain_find(exp: dict) -> list[dict]:
    hc, mhc = by_facts(exp, block="hyper-connections"), by_facts(exp, block="mhc")
    return [{"hc": hc[0], "mhc": mhc[0]}] if hc and mhc else []


def _gain_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "Hyper-Connections' composite gain over depth grows (~3000 in the paper) where mHC's stays near 1"
    gains = {k: seeded((ctx.groups[n].get("measures") or {}).get("largest_gain")) for k, n in b.items()}
    if len(gains["hc"]) < 2 or not gains["mhc"]:
        return claim, INCONCLUSIVE, "fewer than two seeds with stream probes of the final runs."
    text = {k: ", ".join(f"{v:.3g}" for v in g.values()) for k, g in gains.items()}
    # mHC's bound is what its Sinkhorn projection guarantees by construction: a check of that construction,
    # not evidence for the paper; the claim's test is Hyper-Connections' side, which can go either way.
    check = all(v <= GAIN_BOUND for v in gains["mhc"].values())
    level = 1 - stats.ALPHA / ctx.measure_family
    t = measure_test([math.log(v) for v in gains["hc"].values()], None, level)
    lo, hi = (math.exp(x) for x in t["ci"])
    why = (
        f"largest composite gain after training, per seed: {ctx.label(b['hc'])} {text['hc']} (geometric mean "
        f"{math.exp(t['mean']):.3g}, {level:.1%} interval {lo:.3g}..{hi:.3g}) against the bound {GAIN_BOUND:g}; "
        f"{ctx.label(b['mhc'])} {text['mhc']} (a check of its doubly stochastic construction: "
        f"{'within' if check else 'NOT within'} the bound)"
    )
    if not check:
        return claim, NOT, why + ": mHC's construction did not bound its gain."
    status = HOLDS if lo > GAIN_BOUND else NOT if hi <= GAIN_BOUND else INCONCLUSIVE
    return claim, status, why + "."


def _resformer_find(exp: dict) -> list[dict]:
    out = []
    for b in _against_pre_ln(exp, "value-residual"):
        g, r = exp["groups"][b["group"]], exp["groups"][b["ref"]]
        if g.get("n_params") and r.get("n_params") and g["n_params"] < r["n_params"]:
            out.append(b)
    return out


def _resformer_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    g, r = ctx.groups[b["group"]], ctx.groups[b["ref"]]
    fewer = 1 - g["n_params"] / r["n_params"]
    claim = f"{g['label']}: the same loss as Pre-LN with {fewer:.1%} fewer parameters (the paper: 16.11%)"
    status, why = non_inferior(ctx, b["group"], b["ref"])
    return claim, status, f"{why}; {params_text(g, r)}."


HC_GAIN = Rule(
    key="hc-gain",
    paper=MHC,
    statement=f"Holds when the lower end of the interval of Hyper-Connections' largest composite gain (geometric "
    f"mean over seeds, level 1 - 0.05/k over the sweep's k gain claims) is above {GAIN_BOUND:g}; does not hold "
    f"when its upper end is at or below {GAIN_BOUND:g}, or mHC's gain exceeds it on a seed (its construction "
    "guarantees the bound: that side is a check, not evidence); inconclusive otherwise.",
    find=_gain_find,
    judge=_gain_judge,
    measure="largest_gain",
)
RESFORMER_PARAMS = Rule(
    key="resformer-params",
    paper=RESFORMER,
    statement="For a ResFormer with fewer parameters than Pre-LN. " + non_inferiority("Pre-LN"),
    find=_resformer_find,
    judge=_resformer_judge,
)

RULES = [_speedup_rule(b) for b in SPEEDUPS] + [HC_GAIN, RESFORMER_PARAMS]
