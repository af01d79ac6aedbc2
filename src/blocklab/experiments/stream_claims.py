"""The residual-stream papers' headline claims (SPEC 2c), judged from a sweep's verdicts, its final runs' loss
curves and their stream probes, by rules fixed before the runs (SPEC 10: never one figure or one seed).

- Zhu et al. (Hyper-Connections): "1.8x faster convergence". Kimi Team (Attention Residuals): "a 1.25x
  compute advantage". Both as a speed-up in steps to Pre-LN's final training loss (the mean over its seeds of
  a trailing mean of `WINDOW` logged values at the last step): for each final seed of the block, Pre-LN's steps
  to that level (the mean over its seeds of the first step each reaches it) over the block's. A run that never
  reaches it counts its last step, a bound in the claim's favour. `holds`: the mean speed-up reaches the
  claimed factor and its 95% interval lies above 1; `does not hold`: the interval's upper end is below the factor; else `inconclusive`.
  Inside one run the schedule still decays as it reaches a loss, unlike a shorter run of its own: the speed-up
  is measured as the papers' loss-against-tokens figures measure it.
- Xie et al. (mHC): "composite gain ~1.6 where HC's reaches ~3000". From the stream probes after training:
  each seed's largest composite gain over depth (forward or backward, the larger; mean over tokens). `holds`:
  mHC's stays within `GAIN_BOUND` on every seed and HC's exceeds it on every seed; `does not hold`: mHC's
  exceeds it on a seed; `inconclusive`: HC's stayed within it too (the bound made no difference here).
- Zhou et al. (ResFormer): "equivalent validation loss with 16.11% fewer model parameters". A ResFormer group
  with fewer parameters than Pre-LN against Pre-LN, He & Hofmann's rule: `holds` when the upper end of its
  Welch interval is below +tolerance, `does not hold` when it is worse, else `inconclusive`.
Every rule reads `inconclusive` where a side failed (scored the cap) or had its best rate at the grid's edge.
"""

from __future__ import annotations

import json
from pathlib import Path

from blocklab import stats
from blocklab.experiments.claims import per_step, resolved_blocks, unusable
from blocklab.training.rundir import STREAM_PROBES

HC = "Zhu et al. (2025)"
MHC = "Xie et al. (2025)"
ATTN_RES = "Kimi Team (2026)"
RESFORMER = "Zhou et al. (2024)"
WINDOW = 5  # logged training losses in each trailing mean (5 x log_every steps)
GAIN_BOUND = 2.0  # the nearest round bound above mHC's reported 1.6
SPEEDUPS = {
    "hyper-connections": (HC, 1.8, "1.8x faster convergence"),
    "attn-res": (ATTN_RES, 1.25, "a 1.25x compute advantage"),
}


def training_curve(run: Path) -> list[tuple[int, float]]:
    """(step, trailing mean of WINDOW logged training losses) from RUN/metrics.jsonl; [] where unreadable."""
    rows = []
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
            rows.append((int(row["step"]), float(row["loss"])))
        except (ValueError, KeyError, TypeError):
            continue
    rows.sort()
    out = []
    for i, (step, _) in enumerate(rows):
        window = [v for _, v in rows[max(0, i - WINDOW + 1) : i + 1]]
        out.append((step, sum(window) / len(window)))
    return out


def steps_to(curve: list[tuple[int, float]], level: float) -> int:
    """The first step whose trailing loss is at or below `level`; the last step where none is (a lower bound)."""
    return next((s for s, v in curve if v <= level), curve[-1][0])


def speedup(curve: list[tuple[int, float]], level: float, ref_steps: float) -> float:
    """ref_steps over the steps `curve` takes to reach `level` (an upper bound where it never does)."""
    return ref_steps / steps_to(curve, level)


def _speedup_claim(exp, result, name, ref, runs, paper, factor, text) -> dict:
    g = result["groups"][name]
    claim = {"paper": paper, "experiment": exp, "group": name, "claim": f"{g['label']}: {text} over Pre-LN"}
    bad = unusable(result, [ref, name])
    ref_curves = [c for c in (training_curve(r) for r in runs[ref]) if c]
    curves = [c for c in (training_curve(r) for r in runs[name]) if c]
    if bad or len(ref_curves) < 2 or len(curves) < 2:
        why = f"failed or best rate at the grid's edge: {', '.join(bad)}" if bad else "fewer than two seeds a side"
        return claim | {"status": "inconclusive", "why": why + "."}
    level = sum(c[-1][1] for c in ref_curves) / len(ref_curves)
    # Pre-LN's own steps to that level by the same rule: its noisy curve touches its final value before its
    # last step, and counting the last step would flatter every block by the difference
    ref_steps = sum(steps_to(c, level) for c in ref_curves) / len(ref_curves)
    ups = [speedup(c, level, ref_steps) for c in curves]
    mean, _ = stats.mean_sd(ups)
    lo, hi = stats.t_interval(ups)
    if mean >= factor and lo > 1:
        status = "holds"
    elif hi < factor:
        status = "does not hold"
    else:
        status = "inconclusive"
    c = result["comparisons"].get(name, {})
    at_end = (
        f"; at the last step {c['difference']:+.3f} nats [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}], {c['verdict']}"
        if c.get("ci95")
        else ""
    )
    why = (
        f"steps to reach Pre-LN's final training loss {level:.3f} (Pre-LN's own: {ref_steps:.0f}): speed-up "
        f"{', '.join(f'{u:.2f}x' for u in ups)} over {len(ups)} seeds, mean {mean:.2f}x, 95% interval "
        f"{lo:.2f}..{hi:.2f}, against the claimed {factor:g}x (a seed that never reaches it counts its last step, a bound)"
        f"{at_end}."
    )
    return claim | {"status": status, "why": why}


def largest_gain(run: Path) -> float | None:
    """A run's largest composite gain over depth after training (forward or backward), from its stream probes."""
    try:
        gain = json.loads((run / STREAM_PROBES).read_text())["final"]["mixing"]["gain"]
        return max(max(gain["composite_forward"]), max(gain["composite_backward"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _gain_claim(exp, result, hc: str, mhc: str, runs) -> dict:
    claim = {
        "paper": MHC,
        "experiment": exp,
        "group": mhc,
        "claim": "mHC's composite gain over depth stays near 1 (~1.6) where Hyper-Connections' grows (~3000)",
    }
    gains = {n: [g for g in (largest_gain(r) for r in runs[n]) if g is not None] for n in (hc, mhc)}
    if not gains[hc] or not gains[mhc]:
        return claim | {"status": "inconclusive", "why": "no stream probes of the final runs (stream_probes.json)."}
    bounded = all(g <= GAIN_BOUND for g in gains[mhc])
    grew = all(g > GAIN_BOUND for g in gains[hc])
    status = "does not hold" if not bounded else "holds" if grew else "inconclusive"
    text = {n: ", ".join(f"{g:.3g}" for g in v) for n, v in gains.items()}
    why = (
        f"largest composite gain after training, per seed: {result['groups'][mhc]['label']} {text[mhc]}, "
        f"{result['groups'][hc]['label']} {text[hc]}, against the bound {GAIN_BOUND:g}"
        + (
            ""
            if grew or not bounded
            else "; Hyper-Connections' gain did not grow at this size, so the bound was not tested"
        )
        + "."
    )
    return claim | {"status": status, "why": why}


def _resformer_claim(exp, result, name, ref) -> dict:
    g, r = result["groups"][name], result["groups"][ref]
    fewer = 1 - g["n_params"] / r["n_params"]
    claim = {
        "paper": RESFORMER,
        "experiment": exp,
        "group": name,
        "claim": f"{g['label']}: the same loss as Pre-LN with {fewer:.1%} fewer parameters (the paper: 16.11%)",
    }
    status, early = per_step(result, ref, name)
    if early:
        return claim | {"status": status, "why": early}
    c, tol = result["comparisons"][name], result["tolerance"]
    why = (
        f"difference {c['difference']:+.3f} nats, 95% interval {c['ci95'][0]:+.3f}..{c['ci95'][1]:+.3f}, corrected "
        f"p = {c['p_holm']:.2g}, {c['verdict']}; tolerance +{tol:g}; {g['n_params']:,} parameters against "
        f"{r['n_params']:,}."
    )
    return claim | {"status": status, "why": why}


def stream_claims(experiments: dict, sweep, out: Path, finals) -> list[dict]:
    """The four claims above for each experiment whose reference is Pre-LN and that holds their blocks."""
    out = Path(out)
    claims = []
    for exp, result in experiments.items():
        blocks = resolved_blocks(sweep, exp)
        ref = result["reference"]
        if blocks.get(ref) != "pre-ln":
            continue
        largest = sweep.size_indices()[-1]
        keys = {n: (n if largest is None else f"{n}_z{largest}") for n in blocks}  # as the verdicts' finals
        runs = {n: [out / "runs" / r.name for r in finals if r.group == keys[n]] for n in blocks}
        by_block: dict[str, list[str]] = {}
        for n, b in blocks.items():
            by_block.setdefault(b, []).append(n)
        for block, (paper, factor, text) in SPEEDUPS.items():
            for n in by_block.get(block, []):
                claims.append(_speedup_claim(exp, result, n, ref, runs, paper, factor, text))
        for hc in by_block.get("hyper-connections", [])[:1]:
            for mhc in by_block.get("mhc", [])[:1]:
                claims.append(_gain_claim(exp, result, hc, mhc, runs))
        for n in by_block.get("value-residual", []):
            g, r = result["groups"][n], result["groups"][ref]
            if g.get("n_params") and r.get("n_params") and g["n_params"] < r["n_params"]:
                claims.append(_resformer_claim(exp, result, n, ref))
    return claims
