"""experiments/judge.py: the tests of a comparison on per-seed records, the family, and what its words promise,
checked by simulation (A/A sweeps, and groups a known distance apart)."""

import numpy as np
import pytest

from blocklab import stats
from blocklab.experiments.judge import family_words, pair_test

SEEDS = [0, 1, 2, 3, 4]
MARGIN = 0.1


def group(scores, statuses=None):
    statuses = statuses or ["completed" if s is not None else "diverged" for s in scores]
    return {"seeds": list(SEEDS[: len(scores)]), "statuses": statuses, "scores": list(scores)}


def sweep_words(ref, others, test: str) -> list[str]:
    """The words of one sweep: each of `others` against `ref` (lists of per-seed scores), one family."""
    records = []
    for scores in others:
        if test == "paired":
            c = pair_test(group(scores), group(ref))
        else:  # Welch on the same seeds, as a sweep with fewer common seeds than a paired test needs would use
            c = pair_test(group(scores), group(ref))
            r = stats.welch(scores, ref)
            c.update(test="welch", difference=r["difference"], se=r["se"], df=r["df"], ci95=r["ci95"], p=r["p"])
        records.append((c, True, False, MARGIN))
    family_words(records)
    return [c["verdict"] for c, *_ in records]


def simulate(shift: float, test: str, sweeps: int = 1000, seed: int = 20261128):
    """Sweeps of a reference and 5 groups on 5 seeds: each seed's data moves every group alike (sd 0.1, the
    pairing the batches give), each run adds its own noise (sd 0.03); every group `shift` from the reference."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out = []
    for _ in range(sweeps):
        seed_effect = rng.normal(0.0, 0.1, 5)
        ref = list(4.0 + seed_effect + rng.normal(0.0, 0.03, 5))
        others = [list(4.0 + shift + seed_effect + rng.normal(0.0, 0.03, 5)) for _ in range(5)]
        out.append(sweep_words(ref, others, test))
    return out


@pytest.mark.parametrize("test", ["paired", "welch"])
def test_a_a_sweeps_say_better_or_worse_in_at_most_five_percent(test):
    words = simulate(0.0, test)
    flagged = sum(any(w in ("better", "worse") for w in ws) for ws in words) / len(words)
    assert flagged <= 0.05
    if test == "paired":  # identical groups: the paired test can say so
        assert sum(w == "equivalent" for ws in words for w in ws) > 0


@pytest.mark.parametrize("test", ["paired", "welch"])
def test_a_difference_of_one_and_a_half_margins_is_equivalent_in_at_most_five_percent(test):
    words = simulate(1.5 * MARGIN, test)
    said = sum(any(w == "equivalent" for w in ws) for ws in words) / len(words)
    assert said <= 0.05
    # and the paired test sees the difference itself
    if test == "paired":
        assert sum(w == "worse" for ws in words for w in ws) / (5 * len(words)) > 0.5


def test_one_failure_among_five_seeds_is_counted_and_the_score_test_uses_the_other_four():
    ref = [4.00, 4.10, 3.95, 4.05, 4.02]
    g = group([4.20, 4.31, None, 4.24, 4.22])
    c = pair_test(g, group(ref))
    assert c["failures"] == [1, 5, 0, 5] and c["seeds"] == [0, 1, 3, 4] and c["n"] == [4, 4]
    assert c["test"] == "paired"
    expected = stats.paired([4.20, 4.31, 4.24, 4.22], [4.00, 4.10, 4.05, 4.02])
    assert c["difference"] == pytest.approx(expected["difference"]) and c["p"] == pytest.approx(expected["p"])
    assert c["p_fail"] == pytest.approx(stats.boschloo(1, 5, 0, 5))
    family_words([(c, True, False, MARGIN)])
    assert c["family_size"] == 2 and c["verdict"] == "worse"


def test_three_common_seeds_are_welch_and_one_is_no_test():
    c = pair_test(group([4.2, None, 4.3, None, 4.1]), group([4.0, 4.1, 4.0, 4.1, 4.05]))
    assert c["test"] == "welch" and c["n"] == [3, 3]
    c = pair_test(group([4.2, None, None, None, None]), group([4.0, 4.1, 4.0, 4.1, 4.05]))
    assert c["test"] is None and c["p"] is None
    family_words([(c, True, False, MARGIN)])
    assert c["verdict"] == "fails more often" if c["p_fail_holm"] < 0.05 else c["verdict"] == "one seed"


def test_the_family_interval_is_the_one_the_word_was_decided_at():
    ref = [4.00, 4.10, 3.95, 4.05, 4.02]
    comps = [pair_test(group([x + d for x in ref]), group(ref)) for d in (0.3, 0.01, -0.02)]
    for c, d in zip(comps, (0.3, 0.01, -0.02)):
        c["p"] = 0.001 if d == 0.3 else 0.5  # the per-seed differences are exact: set the tests' p by hand
        c["se"] = 0.02
    m = family_words([(c, True, False, MARGIN) for c in comps])
    assert m == 3
    levels = stats.holm_levels([c["p"] for c in comps], 0.05)
    assert levels == pytest.approx([0.05 / 3, 0.05 / 2, 0.05 / 2])  # one rejection: the rest at 0.05 / (3 - 1)
    for c, level in zip(comps, levels):
        lo, hi = c["ci_family"]
        assert (hi - lo) / 2 == pytest.approx(stats.t_quantile(1 - level, 4) * 0.02)
        if c["verdict"] == "equivalent":
            # two one-sided tests at 0.05/3 each: the interval at 1 - 2(0.05/3) inside the margin, and the printed one
            lo2, hi2 = stats.interval(c["difference"], c["se"], c["df"], 1 - 2 * 0.05 / 3)
            assert -MARGIN < lo2 and hi2 < MARGIN and -MARGIN < lo and hi < MARGIN
    assert [c["verdict"] for c in comps] == ["worse", "equivalent", "equivalent"]


def test_a_word_never_contradicts_the_family_interval_beside_it():
    """Over many random families: better/worse exactly when the printed interval excludes 0, and equivalent only
    when it lies inside the margin."""
    rng = np.random.default_rng(7)
    ref = [4.00, 4.10, 3.95, 4.05, 4.02]
    for _ in range(200):
        comps = []
        for _ in range(int(rng.integers(1, 7))):
            shift, noise = rng.normal(0, 0.08), abs(rng.normal(0.02, 0.02)) + 1e-3
            comps.append(pair_test(group([x + shift + rng.normal(0, noise) for x in ref]), group(ref)))
        family_words([(c, True, False, MARGIN) for c in comps])
        for c in comps:
            lo, hi = c["ci_family"]
            assert (c["verdict"] in ("better", "worse")) == (lo > 0 or hi < 0), c
            if c["verdict"] == "equivalent":
                assert -MARGIN < lo and hi < MARGIN
