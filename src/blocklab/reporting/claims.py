"""One sentence per figure on what it shows about the papers' claims, computed from the figure's numbers.

The claims: warm-up rescues Post-LN but hardly matters for Pre-LN (Xiong et al.); the simplified
blocks train at least as fast per step as Pre-LN with fewer parameters (He & Hofmann); signal
propagation at init (Xiong's Lemma 2 and Theorem 1, rank collapse). Every number in a sentence comes
from the rows or the probes.json the figure draws; when a comparison is not in the sweep, the
sentence says what the figure shows instead.
"""

from __future__ import annotations

import math

IGNORED = {("model", "block"), ("train", "warmup_steps"), ("train", "seed")}


def name(block: str) -> str:
    """The block's display label (its BlockSpec's); an unknown name as it is."""
    from blocklab.blocks import REGISTRY

    return REGISTRY[block].label if block in REGISTRY else block


def simplified(block: str) -> bool:
    """One of He & Hofmann's simplified blocks (BlockSpec family "simplified"), whose claim is that they
    train at least as fast per step as Pre-LN. Not the parallel block: it is a classic block (GPT-J)."""
    from blocklab.blocks import REGISTRY

    return block in REGISTRY and REGISTRY[block].family == "simplified"


def _context(group, ignore=IGNORED) -> tuple:
    """The settings a group shares with the groups it is compared with (everything but `ignore`), and its
    experiment: a comparison never crosses two experiments of a sweep (He & Hofmann's Pre-LN is not the
    reference of Xiong et al.'s runs), even where their settings happen to match."""
    run = group.runs[0]
    return (run.experiment,) + tuple(
        sorted(
            (s, k, repr(v))
            for s, vals in run.config.items()
            if isinstance(vals, dict)
            for k, v in vals.items()
            if (s, k) not in ignore
        )
    )


def _lr(group) -> str:
    lr = group.runs[0].cfg("train", "lr")
    return f"lr {lr:g}" if lr is not None else ""


def _fate(row) -> str:
    st = row["statuses"]
    marks = [f"{st.count(s)}/{len(st)} {s}" for s in ("stalled", "diverged") if s in st]
    return f" ({', '.join(marks)})" if marks else ""


def warmup_effects(pairs, key: str = "final_loss") -> list[dict]:
    """Per block and context: the loss without warm-up against the best warm-up. `pairs`: (Group, row)."""
    by = {}
    for g, row in pairs:
        w = g.runs[0].cfg("train", "warmup_steps")
        if w is not None and row.get(key) is not None:
            by.setdefault((g.block, _context(g)), []).append((w, row, g))
    out = []
    for (block, _), items in by.items():
        none = [it for it in items if it[0] == 0]
        warm = [it for it in items if it[0] > 0]
        if none and warm:
            best = min(warm, key=lambda it: it[1][key])
            out.append(
                {
                    "block": block,
                    "lr": _lr(none[0][2]),
                    "without": none[0][1],
                    "with": best[1],
                    "warmup": best[0],
                    "gap": none[0][1][key] - best[1][key],
                }
            )
    return out


def _warmup_clause(effects, key) -> str:
    parts = []
    several = len({e["lr"] for e in effects}) > 1
    for e in effects:
        at = f" at {e['lr']}" if several else ""
        parts.append(
            f"{name(e['block'])}{at} {e['without'][key]:.2f}{_fate(e['without'])} without warm-up "
            f"against {e['with'][key]:.2f}{_fate(e['with'])} with {e['warmup']} steps "
            f"({e['gap']:+.2f})"
        )
    return "; ".join(parts)


def per_step_comparisons(pairs, key: str = "final_loss") -> list[dict]:
    """Each simplified block (He & Hofmann's per-step claim) against Pre-LN under the same settings
    (warm-up included)."""
    ref = {_context(g, IGNORED - {("train", "warmup_steps")}): (g, row) for g, row in pairs if g.block == "pre-ln"}
    out = []
    for g, row in pairs:
        r = ref.get(_context(g, IGNORED - {("train", "warmup_steps")}))
        if simplified(g.block) and r and row.get(key) is not None and r[1].get(key) is not None:
            params = (row["params"] / r[1]["params"] - 1) if row["params"] and r[1]["params"] else None
            out.append(
                {"block": g.block, "value": row[key], "ref": r[1][key], "params": params, "row": row, "lr": _lr(g)}
            )
    return out


def _per_step_clause(comps, key) -> str:
    parts = []
    for c in comps:
        p = (
            f", {abs(c['params']):.0%} {'fewer' if c['params'] < 0 else 'more'} parameters"
            if c["params"] is not None
            else ""
        )
        parts.append(
            f"{name(c['block'])} {c['value']:.2f}{_fate(c['row'])} against Pre-LN's {c['ref']:.2f} "
            f"({c['value'] - c['ref']:+.2f}{p})"
        )
    return "; ".join(parts)


def _verdict(effects, comps) -> str:
    bits = []
    post = [e for e in effects if e["block"] == "post-ln"]
    pre = [e for e in effects if e["block"] == "pre-ln"]
    if post:
        helped = [e for e in post if e["gap"] > 0.1]
        if len(helped) == len(post):
            bits.append("warm-up rescues Post-LN")
        elif helped:
            bits.append(f"warm-up rescues Post-LN at {', '.join(e['lr'] for e in helped)} only")
        else:
            bits.append("warm-up does not clearly help Post-LN here")
    if pre:  # no warm-up at most 0.1 nats worse (or better): Pre-LN does not need it
        bits.append("Pre-LN does not need it" if all(e["gap"] <= 0.1 for e in pre) else "Pre-LN also depends on it")
    if comps:
        ok = [c for c in comps if c["value"] <= c["ref"] + 0.02]
        bits.append(f"{len(ok)} of {len(comps)} simplified-block settings match or beat Pre-LN per step")
    return ", ".join(bits)


def loss_sentence(pairs, key: str = "final_loss", what: str = "final training loss") -> str:
    effects, comps = warmup_effects(pairs, key), per_step_comparisons(pairs, key)
    many = len(effects) + len(comps) > 8
    parts = []
    if effects and not many:
        parts.append("warm-up: " + _warmup_clause(effects, key))
    if comps and not many:
        parts.append("per step: " + _per_step_clause(comps, key))
    stalled = sum(row["statuses"].count("stalled") for _, row in pairs)
    diverged = sum(row["statuses"].count("diverged") for _, row in pairs)
    if stalled or diverged:
        parts.append(f"{stalled} run(s) stalled at the unigram entropy and {diverged} diverged")
    seeds = {row.get("n", 1) for _, row in pairs}
    head = f"{what.capitalize()} ({'one seed each' if seeds == {1} else 'mean over seeds'})"
    verdict = _verdict(effects, comps)
    if not parts:
        vals = sorted((row[key], g.label) for g, row in pairs if row.get(key) is not None)
        if not vals:
            return f"No {what} to compare yet."
        return f"{head}: lowest {vals[0][1]} {vals[0][0]:.2f}, highest {vals[-1][1]} {vals[-1][0]:.2f}."
    return f"{head}: " + "; ".join(parts) + (f" — {verdict}." if verdict else ".")


def time_sentence(pairs) -> str:
    ref = [row["tokens_per_s"] for g, row in pairs if g.block == "pre-ln" and row["tokens_per_s"]]
    rates = {}
    for g, row in pairs:
        if row["tokens_per_s"]:
            rates.setdefault(g.block, []).append(row["tokens_per_s"])
    if not ref or len(rates) < 2:
        return "Per second of training: the same losses spread by each run's throughput (tokens/s in the table)."
    pre = sum(ref) / len(ref)
    parts = [f"{name(b)} {sum(v) / len(v) / pre:.2f}x" for b, v in rates.items() if b != "pre-ln"]
    return (
        "Per second rather than per step, each block moves by its throughput relative to Pre-LN's "
        f"{pre:,.0f} tokens/s: " + ", ".join(parts) + " (measured on a shared machine: timings are noisy)."
    )


def heatmap_sentence(pairs) -> str:
    effects = warmup_effects(pairs, "final_loss")  # the heat map's value: every run has one, stalled or not
    if not effects:
        return "No cell without warm-up to compare with."
    by_block = {}
    for e in effects:
        by_block.setdefault(e["block"], []).append(e)
    parts = [f"{name(b)} " + "/".join(format(e["gap"], "+.2f") for e in es) for b, es in by_block.items()]
    worst = max(by_block, key=lambda b: max(e["gap"] for e in by_block[b]))
    statuses = {b: [s for g, row in pairs if g.block == b for s in row["statuses"]] for b in by_block}
    stuck = [b for b, st in statuses.items() if set(st) == {"stalled"}]
    calm = [name(b) for b, es in by_block.items() if b not in stuck and all(e["gap"] <= 0.1 for e in es)]
    stuck = [f"{name(b)} stalled in all {len(statuses[b])} cells" for b in stuck]
    return (
        "Cost of no warm-up (final training loss without warm-up minus the best warm-up's, per learning "
        "rate): "
        + ", ".join(parts)
        + f"; {name(worst)} needs warm-up most"
        + (f", while no warm-up costs {', '.join(calm)} at most 0.1 nats (negative: better without)" if calm else "")
        + (f"; {', '.join(stuck)}" if stuck else "")
        + "."
    )


def gains_sentence(run) -> str:
    first, last = next((r for r in run.rows if any(k.startswith("gain/") for k in r)), None), None
    for r in reversed(run.rows):
        if any(k.startswith("gain/") for k in r):
            last = r
            break
    if not first or not last:
        return ""
    kinds = {}
    for k in first:
        if k.startswith("gain/") and k in last:
            kind = k.split(".", 1)[1].split(".h")[0]
            kinds.setdefault(kind, []).append((first[k], last[k]))
    parts = [
        f"{kind} {sum(a for a, _ in v) / len(v):.2f} -> {sum(b for _, b in v) / len(v):.2f}"
        for kind, v in sorted(kinds.items())
    ]
    return f"Mean over layers and heads, step {first['step']} to {last['step']}: " + ", ".join(parts) + "."


def probe_sentences(result: dict) -> dict[str, str]:
    """{figure name: sentence} from a probes.json result."""
    out = {}
    try:
        d = result["settings"]["model"]["d_model"]
        res = result["results"]
        depths = sorted(int(k) for k in next(iter(res.values())))
        lo, hi = str(depths[0]), str(depths[-1])
        norms = {
            b: (v[lo]["hidden_sq_norm"]["mean"][-1] / d, v[hi]["hidden_sq_norm"]["mean"][-1] / d)
            for b, v in res.items()
        }
        out["hidden_norms"] = (
            "|x_L|^2/d from L="
            + lo
            + " to L="
            + hi
            + ": "
            + ", ".join(f"{name(b)} {a:.2f} -> {z:.2f}" for b, (a, z) in norms.items())
            + " (Lemma 2: Post-LN flat, Pre-LN growing about linearly with L)."
        )
        grads = {}
        for b, v in res.items():
            ratios = [
                s["mean"][-1] / s["mean"][0]
                for s in v[hi]["grad_norm"].values()
                if s["mean"] and s["mean"][0] and s["mean"][-1] is not None and s["mean"][0] is not None
            ]
            if ratios:
                grads[b] = math.exp(sum(math.log(r) for r in ratios if r > 0) / max(1, len(ratios)))
        out["grad_norms"] = (
            f"Last-layer over first-layer gradient norm at L={hi} (geometric mean over weights): "
            + ", ".join(f"{name(b)} {r:.2f}" for b, r in grads.items())
            + " (Xiong Fig. 3: Post-LN above 1, growing toward the output; Pre-LN about 1)."
        )
        slopes = {b: v.get("slope") for b, v in result.get("last_ffn_vs_depth", {}).items()}
        out["last_ffn_grad"] = (
            "Log-log slope of the last FFN gradient against depth: "
            + ", ".join(f"{name(b)} {s:+.2f}" for b, s in slopes.items() if s is not None)
            + " (Theorem 1: Post-LN 0, Pre-LN -0.5)."
        )
        cos = {b: v[hi]["cosine_similarity"]["mean"][-1] for b, v in res.items()}
        out["cosine_similarity"] = (
            f"Token cosine similarity at the last layer of L={hi}: "
            + ", ".join(f"{name(b)} {c:.2f}" for b, c in cos.items())
            + " (rank collapse when it nears 1; shaped attention should stay near the input's)."
        )
    except (KeyError, TypeError, ValueError, IndexError, StopIteration, ZeroDivisionError):
        pass
    return out
