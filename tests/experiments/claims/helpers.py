"""Hand-made judged experiments for the claim rules: groups with facts and ranges, comparisons with their
family intervals, whose answers are known."""

from blocklab.experiments.claims.base import Context

SEEDS = [0, 1, 2, 3, 4]


def group(name, **fields):
    base = {
        "label": name,
        "facts": {},
        "best_at_edge": False,
        "trainable": [1e-3, 1e-2],
        "seeds": list(SEEDS),
        "statuses": ["completed"] * 5,
        "failed": 0,
        "n_params": 1000,
        "measures": {},
    }
    return base | fields


def comparison(difference=0.0, ci=(-0.05, 0.05), verdict="equivalent", failures=(0, 5, 0, 5), **fields):
    return {
        "test": "paired",
        "n": [5, 5],
        "difference": difference,
        "ci_family": list(ci) if ci is not None else None,
        "ci95": list(ci) if ci is not None else None,
        "correlation": 0.8,
        "p_holm": 0.5,
        "failures": list(failures),
        "verdict": verdict,
        "mde80": 0.1,
    } | fields


def experiment(groups: dict, comparisons=None, contrasts=None, reference="pre", margin=0.1, tuned="train.lr"):
    return {
        "tuned": tuned,
        "reference": reference,
        "margin": margin,
        "tolerance": 0.1,
        "groups": groups,
        "comparisons": comparisons or {},
        "contrasts": contrasts or {},
    }


def judge_one(rule, exp, family=1):
    """The rule's (claim, status, why) on each binding it finds in `exp`."""
    return [rule.judge(Context("e", exp, family), b) for b in rule.find(exp)]
