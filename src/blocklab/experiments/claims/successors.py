"""The headline claims of the later answers to "what goes around a sub-layer" (docs/verdicts.md, "Claims"):
NormFormer's speed to Pre-LN's loss, OLMo 2's reordered norm for stability, MUDDFormer's compute multiplier and
Canon layers' gain over the same block without them."""

from __future__ import annotations

from blocklab.experiments.claims.base import (
    FAILING,
    HOLDS,
    INCONCLUSIVE,
    NOT,
    Context,
    Rule,
    by_facts,
    comparison_text,
    facts,
    range_pair,
    top,
)

OLMO2 = "OLMo et al. (2025)"
MUDD = "Xiao et al. (2025)"
CANON = "Allen-Zhu (2025)"
MUDD_FACTOR = 1.8  # "matches Transformers trained with 1.8x-2.4x compute": the claim's low end


def _pre_ln_reference(exp: dict) -> str | None:
    ref = exp["reference"]
    ref_facts = facts(exp["groups"][ref])
    return ref if ref_facts.get("block") == "pre-ln" and not ref_facts.get("canon") else None


def _olmo2_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "OLMo 2's reordered norm trains stably at higher learning rates than Pre-LN"
    g, r = ctx.groups[b["group"]], ctx.groups[b["ref"]]
    ranges, at_edge = range_pair(ctx, claim, b["group"], b["ref"])
    if at_edge:
        return at_edge
    if ctx.failing(b["group"]) or ctx.test(b["group"], b["ref"]).get("verdict") in FAILING:
        return claim, NOT, f"OLMo 2 fails: {comparison_text(ctx.test(b['group'], b['ref']))}. {ranges}."
    status = HOLDS if top(g) > top(r) else NOT if top(g) < top(r) else INCONCLUSIVE
    return claim, status, f"{ranges}."


OLMO2_RANGE = Rule(
    key="olmo2-range",
    paper=OLMO2,
    statement="On the trainable learning-rate range, against Pre-LN: holds when OLMo 2's range reaches a higher "
    "rate, does not hold when it ends at a lower one or OLMo 2 fails; inconclusive when both end at the same rate "
    "or a best is at the grid's edge.",
    find=lambda exp: [
        {"group": n, "ref": ref} for n in by_facts(exp, block="olmo2") if (ref := _pre_ln_reference(exp))
    ],
    judge=_olmo2_judge,
)


def _mudd_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = f"MUDDFormer matches Pre-LN trained with {MUDD_FACTOR:g}x its compute"
    front = (ctx.exp.get("frontier") or {}).get(b["group"]) or {}
    x, ci = front.get("multiplier"), front.get("multiplier_ci95")
    if ctx.failing(b["group"]):
        return claim, NOT, "MUDDFormer fails at the largest size."
    if x is None or not ci:
        return claim, INCONCLUSIVE, "no compute multiplier with an interval (a fit needs two sizes and two seeds)."
    why = f"compute multiplier {x:.2f}x, 95% interval {ci[0]:.2f}x..{ci[1]:.2f}x (bootstrap over seeds)"
    status = HOLDS if ci[0] > MUDD_FACTOR else NOT if ci[1] < MUDD_FACTOR else INCONCLUSIVE
    return claim, status, f"{why}, against the claimed {MUDD_FACTOR:g}x."


MUDD_COMPUTE = Rule(
    key="muddformer-compute",
    paper=MUDD,
    statement=f"From the compute frontier of a sweep with sizes: holds when the lower end of MUDDFormer's compute "
    f"multiplier's interval against Pre-LN is above {MUDD_FACTOR:g}; does not hold when its upper end is below "
    f"{MUDD_FACTOR:g} or MUDDFormer fails; inconclusive otherwise (no frontier included).",
    find=lambda exp: [
        {"group": n, "ref": ref}
        for n in by_facts(exp, block="muddformer")
        if exp.get("sizes") and (ref := _pre_ln_reference(exp))  # a frontier needs sizes
    ],
    judge=_mudd_judge,
)


def _canon_find(exp: dict) -> list[dict]:
    ref = _pre_ln_reference(exp)
    if ref is None:
        return []
    return [{"group": n, "ref": ref} for n, g in exp["groups"].items() if facts(g).get("canon") and n != ref]


def _canon_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    c = ctx.test(b["group"], b["ref"])
    claim = f"Canon layers ({facts(ctx.groups[b['group']]).get('canon')}) lower the loss of the block they are added to"
    text = comparison_text(c)
    if c.get("verdict") in FAILING:
        return claim, NOT, f"with Canon layers the block {c['verdict']}: {text}."
    edge = ctx.edge(b["group"], b["ref"])
    if edge:
        return claim, INCONCLUSIVE, f"best at the grid's edge for {', '.join(edge)}: {text}."
    if c.get("ci_family") is None:
        return claim, INCONCLUSIVE, f"fewer than two seeds completed on both sides: {text}."
    lo, hi = c["ci_family"]
    status = HOLDS if hi < 0 else NOT if lo > 0 else INCONCLUSIVE
    return claim, status, f"against the same block without them: {text}."


CANON_GAIN = Rule(
    key="canon-gain",
    paper=CANON,
    statement="Against the same block without Canon layers: holds when the family interval of the difference in "
    "final eval loss lies below 0; does not hold when it lies above 0 or the block with Canon fails or fails more "
    "often; inconclusive otherwise (a best at the grid's edge included).",
    find=_canon_find,
    judge=_canon_judge,
)

RULES = [OLMO2_RANGE, MUDD_COMPUTE, CANON_GAIN]
