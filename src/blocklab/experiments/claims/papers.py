"""The two papers' claims (docs/verdicts.md, "Claims"): He & Hofmann's per-step claim and Xiong et al.'s warm-up
claim."""

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
    non_inferior,
    non_inferiority,
    range_text,
    top,
)

HE = "He & Hofmann (2024)"
XIONG = "Xiong et al. (2020)"


def _he_find(exp: dict) -> list[dict]:
    ref = exp["reference"]
    if facts(exp["groups"][ref]).get("block") != "pre-ln":
        return []
    return [{"group": n, "ref": ref} for n in by_facts(exp, family="simplified") if n != ref]


def params_text(g: dict, r: dict) -> str:
    if not (g.get("n_params") and r.get("n_params")):
        return "parameter counts unknown"
    return f"{g['n_params']:,} parameters against {r['n_params']:,} ({g['n_params'] / r['n_params'] - 1:+.0%})"


def he_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    g, r = ctx.groups[b["group"]], ctx.groups[b["ref"]]
    # The parameter saving is part of the claim for the blocks that remove matrices (SAS, SAS-P); the
    # intermediate ones (V-SkipInit, the shaped value/projection) keep Pre-LN's count and claim the speed alone.
    fewer = bool(g.get("n_params") and r.get("n_params") and g["n_params"] < r["n_params"])
    claim = f"{g['label']} trains as fast per step as Pre-LN" + (", with fewer parameters" if fewer else "")
    status, why = non_inferior(ctx, b["group"], b["ref"])
    params = params_text(g, r)
    speed = ""
    if g.get("tokens_per_s") and r.get("tokens_per_s"):
        alone = "" if g.get("measured_alone") and r.get("measured_alone") else " (runs shared the machine)"
        speed = f"; throughput {g['tokens_per_s'] / r['tokens_per_s']:.2f}x Pre-LN's{alone}"
    return claim, status, f"{why}; {params}{speed}."


HE_PER_STEP = Rule(
    key="he-per-step",
    paper=HE,
    statement=non_inferiority("Pre-LN")
    + " A block with fewer parameters than Pre-LN claims the saving too (it is counted, not tested).",
    find=_he_find,
    judge=he_judge,
)


def _xiong_find(exp: dict) -> list[dict]:
    if exp.get("tuned") != "train.lr":
        return []
    roles = {}
    for role, block, warm in (("post0", "post-ln", False), ("post", "post-ln", True)) + (
        ("pre0", "pre-ln", False),
        ("pre", "pre-ln", True),
    ):
        found = by_facts(exp, block=block, warmup=warm, kind=block)
        if not found:
            return []
        roles[role] = found[0]
    return [roles]


def _xiong_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "Without warm-up Post-LN's usable learning rates end lower; Pre-LN's do not"
    G = {k: ctx.groups[n] for k, n in b.items()}
    ranges = ", ".join(range_text(G[k]) for k in ("post0", "post", "pre0", "pre"))
    c = ctx.test(b["pre0"], b["pre"])
    pre = f"Pre-LN without warm-up against with it: {comparison_text(c)}"
    edge = ctx.edge(*b.values())
    if edge:
        return claim, INCONCLUSIVE, f"best learning rate at the grid's edge for {', '.join(edge)}. Trainable: {ranges}."
    lower = top(G["post0"]) < top(G["post"]) and top(G["post0"]) < top(G["pre0"])
    if not lower:
        return (
            claim,
            NOT,
            f"trainable learning rates: {ranges}: Post-LN's range without warm-up does not end below both others; {pre}.",
        )
    if c.get("verdict") in FAILING or ctx.failing(b["pre0"]):
        return claim, NOT, f"trainable: {ranges}; {pre}: Pre-LN without warm-up fails."
    if c.get("ci_family") is not None and c["ci_family"][0] > ctx.margin:
        return claim, NOT, f"trainable: {ranges}; {pre}: worse by more than the margin {ctx.margin:g}."
    if c.get("verdict") in ("equivalent", "better"):
        return claim, HOLDS, f"trainable: {ranges}: Post-LN's range without warm-up ends below both others; {pre}."
    return (
        claim,
        INCONCLUSIVE,
        f"trainable: {ranges}: Post-LN's range ends below both others, but {pre} (neither equivalent nor worse by the margin {ctx.margin:g}).",
    )


XIONG_WARMUP = Rule(
    key="xiong-warmup",
    paper=XIONG,
    statement="Holds when Post-LN without warm-up has a trainable learning-rate range ending below both Post-LN "
    "with warm-up's and Pre-LN without warm-up's, and Pre-LN without warm-up is equivalent to or better than "
    "Pre-LN with it; does not hold when Post-LN without warm-up's range ends at or above either, or Pre-LN "
    "without warm-up fails, fails more often or is worse by more than the margin (the lower end of the family "
    "interval above +margin); inconclusive when a group's best is at the grid's edge, or otherwise.",
    find=_xiong_find,
    judge=_xiong_judge,
    pairs=lambda b: [(b["pre0"], b["pre"])],
)
