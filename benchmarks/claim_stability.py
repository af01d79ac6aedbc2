"""Do the demo's claims reproduce? The quick preset's final seeds at several disjoint seed sets, its tuning shared
(the preset names its tuning seeds, so every set judges the rates they chose), and each claim's status per set.

A claim must never `hold` at one seed set and `not hold` at another. This runs `blocklab compare --preset quick`
once per set into one folder (the tuning runs are trained once and kept; each set adds its own final runs), keeps
each set's verdicts.json, and writes OUT/stability.json: every set's claims, how often each claim was decided, and
whether any claim said both. The README's demo section is generated from that file (scripts/sync_docs.py).

    python benchmarks/claim_stability.py --out results/claim-stability-cpu            # 6 sets of 5 seeds
    python benchmarks/claim_stability.py --out DIR --sets 8 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

PRESET = "quick"
TUNING_SEEDS = (5, 6)  # the quick preset's, never a final seed


def seed_sets(n_sets: int, size: int) -> list[list[int]]:
    """`n_sets` disjoint sets of `size` seeds, the first the preset's own (0..size-1), none a tuning seed."""
    free = (s for s in range(10_000) if s not in TUNING_SEEDS)
    return [[next(free) for _ in range(size)] for _ in range(n_sets)]


def claims_of(verdicts: dict) -> list[dict]:
    return [
        {"paper": c["paper"], "claim": c["claim"], "experiment": c["experiment"], "status": c["status"]}
        for c in verdicts.get("claims") or []
    ]


def stability(sets: list[dict]) -> dict:
    """{claim key: {"holds": n, "does not hold": n, "inconclusive": n}} over the sets, and whether a claim said both."""
    counts: dict[str, dict[str, int]] = {}
    for s in sets:
        for c in s["claims"]:
            key = f"{c['paper']}: {c['claim']} ({c['experiment']})"
            counts.setdefault(key, {"holds": 0, "does not hold": 0, "inconclusive": 0})[c["status"]] += 1
    contradictions = [k for k, n in counts.items() if n["holds"] and n["does not hold"]]
    return {"counts": counts, "contradictions": contradictions}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the folder every set's runs share; OUT/sets/ and stability.json")
    p.add_argument("--sets", type=int, default=6, help="disjoint seed sets (default 6)")
    p.add_argument("--size", type=int, default=5, help="final seeds per set (default 5, the preset's)")
    p.add_argument("--jobs", type=int, default=None, help="runs at once (compare's default when not given)")
    args = p.parse_args(argv)
    from blocklab.cli import main as blocklab

    out = Path(args.out)
    found = []
    for seeds in seed_sets(args.sets, args.size):
        name = f"seeds-{'-'.join(map(str, seeds))}"
        t0 = time.time()
        cmd = ["compare", "--preset", PRESET, "--seeds", ",".join(map(str, seeds)), "--out", str(out / "sweep")]
        cmd += ["--no-report", "--no-progress"] + (["--jobs", str(args.jobs)] if args.jobs else [])
        code = blocklab(cmd)
        if code != 0:
            print(f"{name}: compare exited {code}", file=sys.stderr)
            return code
        kept = out / "sets" / name
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / "sweep" / "verdicts.json", kept / "verdicts.json")
        verdicts = json.loads((kept / "verdicts.json").read_text())
        found.append({"seeds": seeds, "verdicts": f"sets/{name}/verdicts.json", "claims": claims_of(verdicts)})
        print(f"{name} ({time.time() - t0:.0f} s):", *(f"\n  {c['status']}: {c['claim']}" for c in found[-1]["claims"]))
    result = {"preset": PRESET, "tuning_seeds": list(TUNING_SEEDS), "sets": found, **stability(found)}
    (out / "stability.json").write_text(json.dumps(result, indent=2) + "\n")
    for key, n in result["counts"].items():
        print(f"{key}: holds {n['holds']}, does not hold {n['does not hold']}, inconclusive {n['inconclusive']}")
    if result["contradictions"]:
        print(f"CONTRADICTED at some seed set: {result['contradictions']}")
    return 1 if result["contradictions"] else 0


if __name__ == "__main__":
    sys.exit(main())
