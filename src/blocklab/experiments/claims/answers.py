"""The claims of the papers that answered Xiong et al. (docs/verdicts.md, "Claims"): Admin, T-Fixup, ResiDual and
HybridNorm remove the need for warm-up; Derf and DyT do as well as the norm they replace; gated attention
tolerates larger rates and removes the attention sink. "No warm-up" and "warm-up" are one answer's two groups
of an experiment; hi(G) is the top of G's trainable range."""

from __future__ import annotations

from blocklab import stats
from blocklab.experiments.claims.base import (
    FAILING,
    HOLDS,
    INCONCLUSIVE,
    NOT,
    Context,
    Rule,
    by_facts,
    comparison_text,
    completed_seeds,
    measure_test,
    non_inferior,
    non_inferiority,
    range_text,
    seeded,
    top,
)

WARMUP_FREE = {
    "admin": ("Liu et al. (2020)", "Admin"),
    "t-fixup": ("Huang et al. (2020)", "T-Fixup"),
    "resi-dual": ("Xie et al. (2023)", "ResiDual"),
    "hybridnorm": ("Zhuo et al. (2025)", "HybridNorm"),
}
NORM_FREE = {"derf": ("Chen et al. (2025)", "Derf"), "dyt": ("Zhu et al. (2025)", "DyT")}
GATE = "Qiu et al. (2025)"
SINK_MARGIN = 0.05  # first-token mass within this of the evenly spread level: no sink to remove


def _one(exp: dict, kind: str, warm: bool) -> str | None:
    found = by_facts(exp, kind=kind, warmup=warm)
    return found[0] if found else None


def _arms(exp: dict, kind: str) -> dict | None:
    """{a0, a, post0, pre0} for answer `kind`, or None where one of them is missing."""
    if exp.get("tuned") != "train.lr":
        return None
    b = {
        "a0": _one(exp, kind, False),
        "a": _one(exp, kind, True),
        "post0": _one(exp, "post-ln", False),
        "pre0": _one(exp, "pre-ln", False),
    }
    return None if None in b.values() else b


def _warmup_free_rule(kind: str) -> Rule:
    paper, label = WARMUP_FREE[kind]

    def judge(ctx: Context, b: dict) -> tuple[str, str, str]:
        claim = f"{label} trains without warm-up: as high a learning rate as Pre-LN, no loss against its own warm-up"
        G = {k: ctx.groups[n] for k, n in b.items()}
        ranges = ", ".join(range_text(G[k]) for k in ("a0", "a", "post0", "pre0"))
        c = ctx.test(b["a0"], b["a"])
        gap = f"{label} without warm-up against with it: {comparison_text(c)}"
        edge = ctx.edge(*b.values())
        if edge:
            return claim, INCONCLUSIVE, f"best at the grid's edge for {', '.join(edge)}. Trainable: {ranges}."
        if c.get("verdict") in FAILING or ctx.failing(b["a0"]):
            return claim, NOT, f"{label} without warm-up fails; {gap}. Trainable: {ranges}."
        if top(G["post0"]) >= top(G["pre0"]):
            why = f"Post-LN without warm-up trained as high as Pre-LN: no instability to remove. Trainable: {ranges}."
            return claim, INCONCLUSIVE, why
        low = top(G["a0"]) <= top(G["post0"])
        worse = c.get("ci_family") is not None and c["ci_family"][0] > ctx.margin
        if low or worse:
            said = (["its range ends no higher than Post-LN's without warm-up"] if low else []) + (
                [f"it is worse than with warm-up by more than the margin {ctx.margin:g}"] if worse else []
            )
            return claim, NOT, f"trainable: {ranges}; {gap}: {' and '.join(said)}."
        if top(G["a0"]) >= top(G["pre0"]) and c.get("verdict") in ("equivalent", "better"):
            return claim, HOLDS, f"trainable: {ranges}; {gap}: as high as Pre-LN and no worse than with warm-up."
        return claim, INCONCLUSIVE, f"trainable: {ranges}; {gap}."

    return Rule(
        key=f"warmup-free-{kind}",
        paper=paper,
        statement=f"Holds when {label} without warm-up is trainable as high as Pre-LN without warm-up and is "
        "equivalent to or better than itself with warm-up; does not hold when it fails, its range ends no higher "
        "than Post-LN's without warm-up, or it is worse than with warm-up by more than the margin (the lower end "
        "of the family interval above +margin); inconclusive when Post-LN without warm-up trains as high as "
        "Pre-LN (no instability to remove), a best is at the grid's edge, or otherwise.",
        find=lambda exp: [b] if (b := _arms(exp, kind)) else [],
        judge=judge,
        pairs=lambda b: [(b["a0"], b["a"])],
    )


def _norm_free_rule(kind: str) -> Rule:
    paper, label = NORM_FREE[kind]

    def find(exp: dict) -> list[dict]:
        ref = exp["reference"]
        ref_facts = exp["groups"][ref].get("facts") or {}
        if ref_facts.get("kind") != "pre-ln" or exp.get("tuned") != "train.lr":
            return []
        found = _one(exp, kind, bool(ref_facts.get("warmup")))
        return [{"group": found, "ref": ref}] if found else []

    def judge(ctx: Context, b: dict) -> tuple[str, str, str]:
        status, why = non_inferior(ctx, b["group"], b["ref"])
        trainable = f"trainable {range_text(ctx.groups[b['group']])}, {range_text(ctx.groups[b['ref']])}"
        return f"{label} in place of the norm does as well as Pre-LN's LayerNorm", status, f"{why}; {trainable}."

    return Rule(
        key=f"norm-free-{kind}",
        paper=paper,
        statement=non_inferiority("Pre-LN in the same warm-up arm"),
        find=find,
        judge=judge,
    )


def _gate_find(exp: dict) -> list[dict]:
    if exp.get("tuned") != "train.lr":
        return []
    pairs = [(g, p) for w in (True, False) if (g := _one(exp, "gate", w)) and (p := _one(exp, "pre-ln", w))]
    return [{"gates": [g for g, _ in pairs], "pres": [p for _, p in pairs]}] if pairs else []


def _gate_range_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "Gated attention tolerates larger learning rates than Pre-LN"
    G = ctx.groups
    ranges = "; ".join(f"{range_text(G[g])} against {range_text(G[p])}" for g, p in zip(b["gates"], b["pres"]))
    edge = ctx.edge(*b["gates"], *b["pres"])
    if edge:
        return claim, INCONCLUSIVE, f"best at the grid's edge for {', '.join(edge)}. Trainable: {ranges}."
    if ctx.failing(*b["gates"]):
        return claim, NOT, f"the gated block fails. Trainable: {ranges}."
    higher = [top(G[g]) > top(G[p]) for g, p in zip(b["gates"], b["pres"])]
    lower = [top(G[g]) < top(G[p]) for g, p in zip(b["gates"], b["pres"])]
    status = NOT if any(lower) else HOLDS if any(higher) else INCONCLUSIVE
    return claim, status, f"trainable learning rates: {ranges}."


def _gate_sink_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "Gated attention removes the attention sink (less attention on the first token than Pre-LN's)"
    gate, pre = b["gates"][0], b["pres"][0]
    found = {n: seeded((ctx.groups[n].get("measures") or {}).get("first_token_mass")) for n in (gate, pre)}
    common = sorted(
        set(found[gate]) & set(found[pre]) & completed_seeds(ctx.groups[gate]) & completed_seeds(ctx.groups[pre])
    )
    if len(common) < 2:
        return claim, INCONCLUSIVE, "fewer than two seeds with the first-token mass measured on both sides."
    a, r = [found[gate][s] for s in common], [found[pre][s] for s in common]
    level = float((ctx.groups[pre].get("measures") or {}).get("first_token_mass", {}).get("uniform") or 0.0)
    level_test = 1 - stats.ALPHA / ctx.measure_family
    t = measure_test(a, r, level_test)
    lo, hi = t["ci"]
    text = (
        f"first-token mass after training (mean over layers and heads), seeds {common}: {ctx.label(gate)} "
        f"{', '.join(f'{v:.3f}' for v in a)}; {ctx.label(pre)} {', '.join(f'{v:.3f}' for v in r)}; difference "
        f"{t['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] ({level_test:.1%} interval, paired by seed); evenly spread "
        f"attention would put {level:.3f} there"
    )
    if sum(r) / len(r) - level < SINK_MARGIN:
        return claim, INCONCLUSIVE, text + ": Pre-LN formed no sink to remove."
    status = HOLDS if hi < 0 else NOT if lo > 0 else INCONCLUSIVE
    return claim, status, text + "."


GATE_RANGE = Rule(
    key="gate-range",
    paper=GATE,
    statement="Holds when the gated Pre-LN is trainable at least as high as Pre-LN in every warm-up arm and higher "
    "in one; does not hold when lower in one, or the gated block fails; inconclusive otherwise (a best at the "
    "grid's edge included).",
    find=_gate_find,
    judge=_gate_range_judge,
)
GATE_SINK = Rule(
    key="gate-sink",
    paper=GATE,
    statement="On the first-token attention mass after training, paired by seed: holds when the interval of the "
    "gated minus plain Pre-LN difference (level 1 - 0.05/k over the sweep's k sink claims) lies below 0, does not "
    "hold when it lies above 0; inconclusive otherwise, or where Pre-LN's mass is within 0.05 of evenly spread "
    "attention (no sink formed).",
    find=_gate_find,
    judge=_gate_sink_judge,
    measure="first_token_mass",
)

RULES = [_warmup_free_rule(k) for k in WARMUP_FREE] + [_norm_free_rule(k) for k in NORM_FREE] + [GATE_RANGE, GATE_SINK]
