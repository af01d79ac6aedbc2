"""One mechanism for every paper's claim (docs/verdicts.md, "Claims"): a rule finds the groups it is about from
their facts, names the comparisons it reads, and turns verdicts.json's numbers into a status and a why.

Rules are fixed before the runs they judge and read nothing but verdicts.json (group facts, comparisons,
ranges, per-seed measures), so a rejudge recomputes them without the runs. Each is symmetric: the evidence a
claim needs to `hold` is as strong as the evidence it needs to `not hold` (same level, same family), and a
block the claim is about that `fails` makes it `does not hold`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from blocklab import stats

HOLDS, NOT, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
FAILING = ("fails", "fails more often")


def non_inferiority(against: str, hold: str = "", fail: str = "") -> str:
    """The statement of a non-inferiority rule (`non_inferior` below), with a rule's own further conditions."""
    return (
        f"Non-inferiority against {against}: holds when the upper end of the family interval of the difference is "
        f"below +margin{hold}; does not hold when its lower end is above +margin, or the block fails or fails more "
        f"often{fail}; inconclusive otherwise (a best at the grid's edge included)."
    )


@dataclass(frozen=True)
class Rule:
    """A claim's rule. `find(experiment)` -> bindings ({role: group}); `pairs(binding)` -> the (group, against)
    comparisons the rule reads beyond each group against the reference (they join the family);
    `judge(Context, binding)` -> (claim text, status, why). `measure`: the per-seed measure a rule tests on
    its own (claims reading one measure form a family of their own). `muon`: the rule asks its claim under
    Muon, in the experiments whose reference trains with train.optimizer muon; every other rule is asked in
    the other experiments only (a paper's claim is judged under its own optimizer, claims/optimizers.py)."""

    key: str
    paper: str
    statement: str
    find: Callable[[dict], list[dict]]
    judge: Callable[[Context, dict], tuple[str, str, str]]
    pairs: Callable[[dict], list[tuple[str, str]]] = lambda binding: []
    measure: str | None = None
    muon: bool = False


@dataclass
class Context:
    """What a rule reads: the experiment, its comparisons and contrasts, and the size of its measure's family."""

    name: str
    exp: dict
    measure_family: int = 1
    groups: dict = field(init=False)

    def __post_init__(self):
        self.groups = self.exp["groups"]

    @property
    def margin(self) -> float:
        return float(self.exp.get("margin") or self.exp.get("tolerance") or 0.1)

    def test(self, a: str, b: str) -> dict:
        """The comparison of group `a` against group `b`: against the reference from `comparisons`, else the
        contrast the rule asked for."""
        if b == self.exp["reference"]:
            return self.exp["comparisons"][a]
        return self.exp["contrasts"][f"{a} vs {b}"]

    def label(self, name: str) -> str:
        return self.groups[name]["label"]

    def edge(self, *names: str) -> list[str]:
        return [self.label(n) for n in names if self.groups[n].get("best_at_edge")]

    def failing(self, *names: str) -> list[str]:
        """Labels of the groups that failed every final seed."""
        out = []
        for n in names:
            g = self.groups[n]
            if g["seeds"] and all(s not in ("completed",) for s in g["statuses"]) and g.get("failed"):
                out.append(self.label(n))
        return out


def facts(group: dict) -> dict:
    return group.get("facts") or {}


def under_muon(exp: dict) -> bool:
    """Whether the experiment's reference trains with Muon (its facts' optimizer; none in older files)."""
    return facts(exp["groups"][exp["reference"]]).get("optimizer") == "muon"


def by_facts(exp: dict, **want) -> list[str]:
    """The groups whose facts match every `want` (in the experiment's order)."""
    return [n for n, g in exp["groups"].items() if all(facts(g).get(k) == v for k, v in want.items())]


def top(group: dict) -> float:
    """The top of a group's trainable range, -inf where it has none."""
    r = group.get("trainable")
    return -math.inf if r is None else float(r[1])


def range_text(group: dict) -> str:
    r = group.get("trainable")
    return f"{group['label']} {'none' if r is None else f'{r[0]:g}..{r[1]:g}'}"


def range_pair(ctx: Context, claim: str, a: str, b: str) -> tuple[str, tuple[str, str, str] | None]:
    """Groups `a` and `b`'s trainable ranges as text, and the claim's answer where either's best is at the grid's
    edge (inconclusive: the grid does not bracket it), else None."""
    ranges = f"trainable {range_text(ctx.groups[a])} against {range_text(ctx.groups[b])}"
    edge = ctx.edge(a, b)
    return ranges, (claim, INCONCLUSIVE, f"best at the grid's edge for {', '.join(edge)}. {ranges}.") if edge else None


def comparison_text(c: dict) -> str:
    """ "-0.12, family interval [-0.20, -0.04] (paired, 5 seeds, r 0.87), p_holm 0.01: better"."""
    word = c.get("verdict") or "no verdict"
    if c.get("ci_family") is None:
        k, n, k_ref, n_ref = c.get("failures") or [0, 0, 0, 0]
        return f"{word} (failed {k} of {n} seeds against {k_ref} of {n_ref}; no score test)"
    lo, hi = c["ci_family"]
    r = c.get("correlation")
    test = f"{c['test']}, {c['n'][0]} seeds" + (f", r {r:.2f}" if r is not None else "")
    fails = c.get("failures") or [0, 0, 0, 0]
    failed = f"; failed {fails[0]} of {fails[1]} against {fails[2]} of {fails[3]}" if fails[0] or fails[2] else ""
    return (
        f"{c['difference']:+.3f}, family interval [{lo:+.3f}, {hi:+.3f}] ({test}), p_holm {c['p_holm']:.2g}"
        f"{failed}: {word}"
    )


def non_inferior(ctx: Context, name: str, ref: str) -> tuple[str, str]:
    """Non-inferiority of `name` against `ref` on the family's interval (He & Hofmann's per-step rule):
    (status, why)."""
    c = ctx.test(name, ref)
    text = comparison_text(c)
    if c.get("verdict") in FAILING:
        return NOT, f"{ctx.label(name)} {c['verdict']}: {text}"
    if ctx.failing(ref):
        return INCONCLUSIVE, f"the reference {ctx.label(ref)} failed every seed: {text}"
    edge = ctx.edge(name, ref)
    if edge:
        return INCONCLUSIVE, f"best at the grid's edge for {' and '.join(edge)} (the grid does not bracket it): {text}"
    if c.get("ci_family") is None:
        return INCONCLUSIVE, f"fewer than two seeds completed on both sides: {text}"
    lo, hi = c["ci_family"]
    if hi < ctx.margin:
        return HOLDS, f"{text}; the interval ends below +{ctx.margin:g}"
    if lo > ctx.margin:
        return NOT, f"{text}; the interval starts above +{ctx.margin:g}"
    return INCONCLUSIVE, f"{text}; the interval contains +{ctx.margin:g}"


def measure_test(a: list[float], b: list[float] | None, level: float) -> dict:
    """A claim's own test on a per-seed measure: the mean of `a` (one sample) or of a - b paired by position
    (lists already aligned by seed), with its Student-t interval at `level`."""
    values = a if b is None else [x - y for x, y in zip(a, b)]
    mean, sd = stats.mean_sd(values)
    ci = stats.t_interval(values, level) if len(values) > 1 else None
    return {"mean": mean, "sd": sd, "ci": ci, "n": len(values)}


def seeded(measure: dict | None) -> dict:
    """{seed: value} of a stored per-seed measure ({"seeds": [...], "values": [...]})."""
    if not isinstance(measure, dict):
        return {}
    return {s: v for s, v in zip(measure.get("seeds") or [], measure.get("values") or []) if v is not None}


def completed_seeds(group: dict) -> set:
    return {s for s, st in zip(group["seeds"], group["statuses"]) if st == "completed"}
