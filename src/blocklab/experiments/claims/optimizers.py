"""Two papers' claims asked again under Muon (docs/verdicts.md, "Claims"; the `optimizers` preset): He & Hofmann's
per-step claim and Xiong et al.'s warm-up claim, in the experiments whose groups train with train.optimizer muon.
The papers' own rules (claims/papers.py) are asked under the optimizers the papers used; these say what is left of
each claim when Muon (docs/cli.md, train.optimizer) steps the blocks' matrices instead."""

from __future__ import annotations

import dataclasses

from blocklab.experiments.claims.base import (
    HOLDS,
    INCONCLUSIVE,
    NOT,
    Context,
    Rule,
    by_facts,
    range_pair,
    top,
)
from blocklab.experiments.claims.papers import HE_PER_STEP, XIONG, he_judge

MUON = "muon"


def _plain(label: str) -> str:
    """A factor's cell label without its level ("SAS-P, muon" -> "SAS-P")."""
    return label.removesuffix(f", {MUON}")


def _he_muon_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim, status, why = he_judge(ctx, b)
    label = ctx.label(b["group"])
    return f"Under Muon, {_plain(label)}{claim.removeprefix(label)}", status, why


HE_PER_STEP_MUON = dataclasses.replace(
    HE_PER_STEP,
    key="he-per-step-muon",
    statement="Under Muon, both blocks' matrices stepped by it. " + HE_PER_STEP.statement,
    judge=_he_muon_judge,
    muon=True,
)


def _xiong_muon_find(exp: dict) -> list[dict]:
    if exp.get("tuned") != "train.lr":
        return []
    post0 = by_facts(exp, block="post-ln", kind="post-ln", warmup=False, optimizer=MUON)
    post = by_facts(exp, block="post-ln", kind="post-ln", warmup=True, optimizer=MUON)
    return [{"post0": post0[0], "post": post[0]}] if post0 and post else []


def _grid_top(ctx: Context, *names: str) -> float | None:
    """The largest rate the groups were tuned at (their curves', extensions included; else the experiment's grid)."""
    values = [p["value"] for n in names for p in ctx.groups[n].get("curve") or []] or ctx.exp.get("values") or []
    return max(values) if values else None


def _xiong_muon_judge(ctx: Context, b: dict) -> tuple[str, str, str]:
    claim = "Under Muon, without warm-up Post-LN's usable learning rates still end lower than with warm-up"
    g0, g = ctx.groups[b["post0"]], ctx.groups[b["post"]]
    ranges, at_edge = range_pair(ctx, claim, b["post0"], b["post"])
    if at_edge:
        return at_edge
    if g.get("trainable") is None and g0.get("trainable") is None:
        return claim, NOT, f"{ranges}: warm-up rescued nothing, Post-LN trains at no rate either way."
    if top(g0) < top(g):
        return claim, HOLDS, f"{ranges}: without warm-up the range ends lower."
    if top(g0) > top(g):
        return claim, NOT, f"{ranges}: without warm-up the range ends higher."
    if top(g) == _grid_top(ctx, b["post0"], b["post"]):
        return claim, INCONCLUSIVE, f"{ranges}: both train at the grid's largest rate, where neither range ends."
    return claim, NOT, f"{ranges}: both ranges end at the same rate."


XIONG_WARMUP_MUON = Rule(
    key="xiong-warmup-muon",
    paper=XIONG,
    statement="Under Muon, Post-LN with warm-up and without: holds when the trainable learning-rate range without "
    "warm-up ends below the range with it (no range at all counting as lowest); does not hold when it ends at the "
    "same rate or above, or neither trains at any rate; inconclusive when a best is at the grid's edge or both "
    "train at the grid's largest rate (where neither range is seen to end).",
    find=_xiong_muon_find,
    judge=_xiong_muon_judge,
    muon=True,
)

RULES = [HE_PER_STEP_MUON, XIONG_WARMUP_MUON]
