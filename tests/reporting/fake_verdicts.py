"""A tuned sweep as `blocklab compare` lays it out: DIR/verdicts.json (docs/verdicts.md), sweep.json whose `runs`
are the final runs and whose `tuning` lists the tuning runs, a few run folders of each, and an old run under
replaced/.

"he" tunes train.lr over (1e-3, 3e-3, 1e-2) on seed 3, final seeds 0 and 1, with two sizes (a frontier):
Pre-LN the reference (best 3e-3), SAS best at the grid's upper edge (its comparison `at edge`), SAS-P one final
seed. "xiong" has Post-LN without warm-up failing at every rate and every seed (`fails`), Pre-LN without warm-up
the reference, and Post-LN with warm-up unresolved against it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reporting.fakes import write_run

LRS = [1e-3, 3e-3, 1e-2]
CAP = 5.5


def _curve(means, failed=()):
    """One tuning seed (3) per value; the values in `failed` failed (diverged: no score)."""
    out = []
    for lr, m in zip(LRS, means):
        bad = lr in failed
        out.append(
            {
                "value": lr,
                "seeds": [3],
                "statuses": ["diverged" if bad else "completed"],
                "raw": [None if bad else m],
                "scores": [None if bad else m],
                "mean": None if bad else m,
                "extended": False,
            }
        )
    return out


def _group(
    label,
    block,
    means,
    best,
    *,
    edge=False,
    stable=None,
    trainable=None,
    sensitivity=0.2,
    seeds=(0, 1),
    scores=(3.5, 3.6),
    ci=(3.0, 4.1),
    failed=(),
    warmup=None,
):
    settings = {"model.block": block} | ({"train.warmup_steps": warmup} if warmup is not None else {})
    done = [s for s in scores if s is not None]
    return {
        "label": label,
        "settings": settings,
        "facts": {"block": block, "warmup": bool(warmup) if warmup is not None else True},
        "curve": _curve(means, failed),
        "best": best,
        "best_completed": trainable is not None,
        "best_at_edge": edge,
        "stable": stable,
        "trainable": trainable,
        "sensitivity": sensitivity,
        "seeds": list(seeds),
        "statuses": ["completed" if s is not None else "stalled" for s in scores],
        "raw": list(scores),
        "scores": list(scores),
        "failed": sum(s is None for s in scores),
        "mean": sum(done) / len(done) if done else None,
        "sd": 0.07 if done else None,
        "ci95": list(ci) if ci else None,
        "n_params": 1000,
        "tokens_per_s": 2000.0,
    }


def _comparison(against, difference, ci, family, verdict, p=None, p_holm=None, n=2, failures=(0, 2, 0, 2), **more):
    return {
        "against": against,
        "test": "welch" if ci else None,
        "correlation": None,
        "seeds": [0, 1][:n],
        "n": [n, n],
        "difference": difference,
        "se": 0.035 if ci else None,
        "df": 2.0 if ci else None,
        "ci95": list(ci) if ci else None,
        "ci_family": list(family) if family else None,
        "p": p,
        "p_holm": p_holm,
        "failures": list(failures),
        "p_fail": None,
        "p_fail_holm": None,
        "mde80": 0.42 if ci else None,
        "p_equivalence": 0.3 if ci else None,
        "family_size": 3,
        "verdict": verdict,
    } | more


def verdicts() -> dict:
    he_groups = {
        "pre-ln": _group(
            "Pre-LN",
            "pre-ln",
            [3.8, 3.55, 3.9],
            3e-3,
            stable=[3e-3, 3e-3],
            trainable=[1e-3, 1e-2],
            scores=(3.5, 3.6),
            ci=(2.91, 4.19),
        ),
        "sas": _group(
            "SAS",
            "sas",
            [3.9, 3.5, 3.25],
            1e-2,
            edge=True,
            stable=[1e-2, 1e-2],
            trainable=[1e-3, 1e-2],
            scores=(3.2, 3.3),
            ci=(2.61, 3.89),
        ),
        "sas-p": _group(
            "SAS-P",
            "sas-p",
            [3.7, 3.6, 3.65],
            3e-3,
            stable=[1e-3, 1e-2],
            trainable=[1e-3, 1e-2],
            seeds=(0,),
            scores=(3.65,),
            ci=None,
        ),
    }
    he = {
        "title": "He & Hofmann",
        "metric": "final_eval_loss",
        "lower_is_better": True,
        "tuned": "train.lr",
        "reference": "pre-ln",
        "tolerance": 0.1,
        "margin": 0.1,
        "cap": CAP,
        "tuning_runs_reused": False,
        "tuning_seeds": [3],
        "noise_floor": 0.0707,
        "pooled_sd": 0.0707,
        "family_size": 3,
        "values": LRS,
        "eval_noise": 0.004,
        "eval_noise_paired": True,
        "sizes": [{"model.d_model": 32}, {"model.d_model": 64}],
        "groups": he_groups,
        "comparisons": {
            "sas": _comparison("pre-ln", -0.3, (-0.45, -0.15), (-0.6, 0.0), "at edge", 0.004, 0.012),
            "sas-p": _comparison("pre-ln", 0.1, None, None, "one seed", n=1, failures=(0, 1, 0, 2)),
        },
        "frontier": {
            g: {
                "points": [
                    {
                        "size": i,
                        "flops": f,
                        "best": 3e-3,
                        "seeds": [0, 1],
                        "scores": [m, m + 0.1],
                        "mean": m + 0.05,
                        "ci95": [m - 0.2, m + 0.3],
                    }
                    for i, (f, m) in enumerate([(1e12, 4.0 + k), (8e12, 3.5 + k)])
                ],
                "fit": {"a": 10.0 + k, "alpha": 0.035},
                "multiplier": 1.0 if g == "pre-ln" else 1.8,
                "multiplier_ci95": [1.0, 1.0] if g == "pre-ln" else [1.2, 2.6],
            }
            for g, k in (("pre-ln", 0.0), ("sas", -0.2))
        },
    }
    xiong_groups = {
        "post-ln_wu0": _group(
            "Post-LN, no warm-up",
            "post-ln",
            [CAP] * 3,
            1e-3,
            stable=None,
            trainable=None,
            sensitivity=None,
            edge=None,
            scores=(None, None),
            ci=None,
            failed=LRS,
            warmup=0,
        ),
        "pre-ln_wu0": _group(
            "Pre-LN, no warm-up",
            "pre-ln",
            [3.9, 3.7, 3.8],
            3e-3,
            stable=[1e-3, 1e-2],
            trainable=[1e-3, 1e-2],
            warmup=0,
            scores=(3.7, 3.8),
            ci=(3.06, 4.44),
        ),
        "post-ln_wu": _group(
            "Post-LN, warm-up 60",
            "post-ln",
            [3.9, 3.75, 4.4],
            3e-3,
            stable=[1e-3, 3e-3],
            trainable=[1e-3, 3e-3],
            warmup=60,
            scores=(3.75, 3.85),
            ci=(3.11, 4.49),
            failed=[1e-2],
        ),
    }
    xiong = {
        "title": "Xiong et al.",
        "metric": "final_eval_loss",
        "lower_is_better": True,
        "tuned": "train.lr",
        "reference": "pre-ln_wu0",
        "tolerance": 0.1,
        "margin": 0.1,
        "cap": CAP,
        "tuning_runs_reused": True,
        "tuning_seeds": [3],
        "noise_floor": 0.0707,
        "pooled_sd": 0.0707,
        "family_size": 3,
        "values": LRS,
        "eval_noise": None,
        "sizes": None,
        "groups": xiong_groups,
        "comparisons": {
            "post-ln_wu0": _comparison(
                "pre-ln_wu0", None, None, None, "fails", n=0, failures=(2, 2, 0, 2), p_fail=0.11, p_fail_holm=0.22
            ),
            "post-ln_wu": _comparison("pre-ln_wu0", 0.05, (-0.12, 0.22), (-0.28, 0.38), "unresolved", 0.4, 0.4),
        },
    }
    claims = [
        {
            "paper": "He & Hofmann 2023",
            "claim": "simplified blocks train as fast per step as Pre-LN",
            "status": "holds",
            "why": "SAS's interval against Pre-LN ends at -0.15, below +0.1",
            "experiment": "he",
        },
        {
            "paper": "Xiong et al. 2020",
            "claim": "Post-LN needs warm-up",
            "status": "inconclusive",
            "why": "SAS's best is at the grid's edge.",
            "experiment": "xiong",
        },
        {
            "paper": "Wortsman et al. 2023",
            "claim": "qk-norm widens the stable range",
            "status": "does not hold",
            "why": "no experiment of this sweep tests it",
        },
    ]
    return {"sweep": "tuned", "experiments": {"he": he, "xiong": xiong}, "claims": claims}


# (experiment, group, block, warm-up, final loss at step 200 of seed 0)
GROUPS = [
    ("he", "pre-ln", "pre-ln", 10, 3.5),
    ("he", "sas", "sas", 10, 3.2),
    ("he", "sas-p", "sas-p", 10, 3.65),
    ("xiong", "pre-ln_wu0", "pre-ln", 0, 3.7),
    ("xiong", "post-ln_wu", "post-ln", 60, 3.75),
]
TUNING = ["he_pre-ln_lr0.001_s3", "he_pre-ln_lr0.01_s3", "he_sas_lr0.001_s3"]
REUSED = "xiong_pre-ln_wu0_lr0.003_s3"  # xiong reuses tuning runs: its tuning run at the best lr is a final seed too


def make_tuned_sweep(root: Path, with_verdicts: bool = True) -> Path:
    runs, tuning = [], []
    for exp, group, block, warmup, final in GROUPS:
        lr = 1e-2 if group == "sas" else 3e-3
        for seed in (0,) if group == "sas-p" else (0, 1):
            name = f"{exp}_{group}_s{seed}"
            write_run(
                root / "runs" / name,
                block,
                (6.0 - final - 0.1 * seed) / 200,
                last_step=200,
                lr=lr,
                warmup=warmup,
                seed=seed,
            )
            runs.append(
                {
                    "name": name,
                    "label": f"{group}, seed {seed}",
                    "group": f"{exp}_{group}",
                    "group_label": group,
                    "seed": seed,
                    "experiment": exp,
                    "dir": f"runs/{name}",
                }
            )
    for name in TUNING + [REUSED]:
        write_run(root / "runs" / name, "pre-ln", 0.01, last_step=200, lr=1e-3, seed=3)
        tuning.append(
            {
                "name": name,
                "label": name,
                "group": name.rsplit("_", 2)[0],
                "seed": 3,
                "experiment": name.split("_", 1)[0],
                "dir": f"runs/{name}",
                "value": 1e-3,
                "size": None,
            }
        )
    runs.append(dict(tuning[-1], group="xiong_pre-ln_wu0", group_label="pre-ln_wu0"))  # the reused one
    write_run(root / "replaced" / "runs" / "he_pre-ln_s0", "pre-ln", 0.001, last_step=200, seed=0)  # moved aside
    (root / "sweep.json").write_text(
        json.dumps(
            {
                "name": "tuned",
                "description": "A tuned comparison.",
                "runs": runs,
                "tuning": tuning,
                "experiments": {
                    "he": {"title": "He & Hofmann", "description": "", "target_run": "he_pre-ln"},
                    "xiong": {"title": "Xiong et al.", "description": "", "target_run": "xiong_pre-ln_wu0"},
                },
            }
        )
    )
    if with_verdicts:
        (root / "verdicts.json").write_text(json.dumps(verdicts(), indent=1))
    return root
