"""The two papers' claims, judged from the verdicts by SPEC 10's rules (never from one figure or one seed).

- He & Hofmann: a simplified block trains as fast per step as Pre-LN with fewer parameters: `holds` when the
  upper end of its Welch interval against Pre-LN is below +tolerance and it has fewer parameters, `does not
  hold` when it is `worse`, else `inconclusive`.
- Xiong et al.: without warm-up Post-LN's usable learning rates end lower, Pre-LN's do not: `holds` when
  Post-LN without warm-up has a trainable range ending below both Post-LN with warm-up's and Pre-LN without
  warm-up's, and Pre-LN without warm-up is within tolerance of Pre-LN with it; `inconclusive` when any of these
  groups has its best at the grid's edge (the grid did not bracket it).
"""

from __future__ import annotations

from blocklab.registry import REGISTRY

HE = "He & Hofmann (2024)"
XIONG = "Xiong et al. (2020)"


def resolved_configs(sweep, exp) -> dict:
    """{group: its run config} of experiment `exp`, resolved as its first final run's at the largest size (a
    setting may come from the base or a block's recipe); the tuned setting at its first grid value."""
    out = {}
    for g in sweep.groups:
        if (str(g.experiment) if g.experiment else sweep.name) != exp:
            continue
        tune = sweep.tune_of(g)
        size = sweep.size_indices()[-1]
        out[g.name] = sweep.make_run(g, size, tune.values[0] if tune else None, sweep.final_seeds()[0], "final").config
    return out


def resolved_groups(sweep, exp) -> dict:
    """{group: (block, warm-up steps)} from each group's resolved config (a warm-up may come from the base)."""
    return {name: (cfg.model.block, cfg.train.warmup_steps) for name, cfg in resolved_configs(sweep, exp).items()}


def resolved_blocks(sweep, exp) -> dict:
    """{group: block} of experiment `exp`, from each group's resolved config."""
    return {name: block for name, (block, _) in resolved_groups(sweep, exp).items()}


def unusable(result: dict, names: list[str]) -> list[str]:
    """Labels of the groups of `names` that failed (no mean, or a mean at the cap) or have their best value at the
    grid's edge: a claim that reads them is inconclusive."""
    cap, out = result["cap"], []
    for n in names:
        g = result["groups"][n]
        if g.get("best_at_edge") or g["mean"] is None or (cap is not None and g["mean"] >= cap):
            out.append(g["label"])
    return out


def per_step(result: dict, ref: str, name: str) -> tuple[str, str | None]:
    """He & Hofmann's rule for group `name` against `ref` from its comparison: `holds` when the upper end of the
    Welch interval is below +tolerance, `does not hold` when `worse`, else `inconclusive`. Returns (status, why)
    with `why` set only where no comparison could be read (a failed or edge group, fewer than two seeds)."""
    bad = unusable(result, [ref, name])
    c = result["comparisons"].get(name, {})
    if bad or not c.get("ci95"):
        why = f"failed or best rate at the grid's edge: {', '.join(bad)}" if bad else "fewer than two seeds a side"
        return "inconclusive", why + "."
    status = "does not hold" if c["verdict"] == "worse" else "holds" if c["ci95"][1] < result["tolerance"] else None
    return status or "inconclusive", None


def _fmt_range(r) -> str:
    return "none" if r is None else f"{r[0]:g}..{r[1]:g}"


def _he(exp: str, result: dict, groups: dict) -> list[dict]:
    ref = result["reference"]
    if groups.get(ref, (None,))[0] != "pre-ln":
        return []
    out = []
    tol = result["tolerance"]
    r = result["groups"][ref]
    for name, (block, _) in groups.items():
        spec = REGISTRY.get(block)
        if name == ref or spec is None or spec.family != "simplified":
            continue
        g, c = result["groups"][name], result["comparisons"].get(name, {})
        fewer = g["n_params"] is not None and r["n_params"] is not None and g["n_params"] < r["n_params"]
        failed = (
            [x["label"] for x in (r, g) if x["mean"] is not None and x["mean"] >= result["cap"]]
            if result["cap"] is not None
            else []
        )
        edge = [x["label"] for x in (r, g) if x.get("best_at_edge")]
        if failed or edge:
            status = "inconclusive"
        elif c.get("verdict") == "worse":
            status = "does not hold"
        elif c.get("ci95") is not None and c["ci95"][1] < tol and fewer:
            status = "holds"
        else:
            status = "inconclusive"
        params = (
            f"{g['n_params']:,} parameters against {r['n_params']:,} ({g['n_params'] / r['n_params'] - 1:+.0%})"
            if g["n_params"] and r["n_params"]
            else "parameter counts unknown"
        )
        if c.get("ci95") is not None:
            diff = (
                f"difference {c['difference']:+.3f} nats, 95% interval {c['ci95'][0]:+.3f}..{c['ci95'][1]:+.3f} "
                f"({c['n'][0]} vs {c['n'][1]} seeds, each at its own best), corrected p = {c['p_holm']:.2g}, "
                f"{c['verdict']}"
            )
        else:
            diff = f"{c.get('verdict', 'no comparison')}: fewer than two seeds on a side, no interval"
        speed = ""
        if g.get("tokens_per_s") and r.get("tokens_per_s"):
            alone = "" if g.get("measured_alone") and r.get("measured_alone") else " (runs shared the machine)"
            speed = f"; throughput {g['tokens_per_s'] / r['tokens_per_s']:.2f}x Pre-LN's{alone}"
        if failed:
            diff = f"{' and '.join(failed)} scored the cap (trained no better than the unigram model): {diff}"
        elif edge:
            diff = f"best learning rate at the grid's edge for {' and '.join(edge)} (the grid is too narrow): {diff}"
        out.append(
            {
                "paper": HE,
                "experiment": exp,
                "group": name,
                "claim": f"{g['label']} trains as fast per step as Pre-LN, with fewer parameters",
                "status": status,
                "why": f"{diff}; tolerance +{tol:g}; {params}{speed}.",
            }
        )
    return out


def _xiong(exp: str, result: dict, groups: dict) -> list[dict]:
    def find(block, warm):
        return next((n for n, (b, w) in groups.items() if b == block and (w == 0) != warm), None)

    names = {
        "post0": find("post-ln", False),
        "post": find("post-ln", True),
        "pre0": find("pre-ln", False),
        "pre": find("pre-ln", True),
    }
    if None in names.values() or result["tuned"] != "train.lr":
        return []
    g = {k: result["groups"][n] for k, n in names.items()}
    tr = {k: v["trainable"] for k, v in g.items()}
    text = ", ".join(f"{g[k]['label']} {_fmt_range(tr[k])}" for k in ("post0", "post", "pre0", "pre"))
    edge = [g[k]["label"] for k in g if g[k]["best_at_edge"]]
    if edge:
        return [
            {
                "paper": XIONG,
                "experiment": exp,
                "status": "inconclusive",
                "claim": "Without warm-up Post-LN's usable learning rates end lower; Pre-LN's do not",
                "why": f"best learning rate at the grid's edge for {', '.join(edge)}: the grid does not bracket "
                f"it. Trainable ranges: {text}.",
            }
        ]

    def high(k):
        return -float("inf") if tr[k] is None else tr[k][1]

    lower = high("post0") < high("post") and high("post0") < high("pre0")
    tol = result["tolerance"]
    known = g["pre0"]["mean"] is not None and g["pre"]["mean"] is not None
    close = known and abs(g["pre0"]["mean"] - g["pre"]["mean"]) <= tol
    gap = (
        f"Pre-LN without warm-up {g['pre0']['mean']:.3f} against {g['pre']['mean']:.3f} with it, "
        f"{g['pre0']['mean'] - g['pre']['mean']:+.3f} ({'within' if close else 'beyond'} the tolerance {tol:g})"
        if known
        else "Pre-LN's means unknown"
    )
    return [
        {
            "paper": XIONG,
            "experiment": exp,
            "status": "holds" if lower and close else "does not hold",
            "claim": "Without warm-up Post-LN's usable learning rates end lower; Pre-LN's do not",
            "why": f"trainable learning rates (every tuning seed completed and at least {tol:g} below the cap): "
            f"{text}, so Post-LN's range without warm-up {'ends' if lower else 'does not end'} below both "
            f"others; {gap}.",
        }
    ]


def claims(experiments: dict, sweep) -> list[dict]:
    out = []
    for exp, result in experiments.items():
        groups = resolved_groups(sweep, exp)
        out += _he(exp, result, groups) + _xiong(exp, result, groups)
    return out
