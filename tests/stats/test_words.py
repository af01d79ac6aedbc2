"""blocklab.stats.words: the verdict word is the first rule that applies."""

import pytest

from blocklab import stats

BASE = dict(
    failures=[0, 5, 0, 5],
    n_common=5,
    p_fail_holm=None,
    p_holm=0.5,
    difference=0.02,
    p_equivalence=0.5,
    family_size=5,
    at_edge=False,
)


def word(**changes):
    return stats.verdict(**{**BASE, **changes})


def test_failing_every_seed_comes_first():
    assert word(failures=[5, 5, 0, 5], n_common=0, p_holm=None, difference=None) == "fails"
    assert word(failures=[3, 3, 3, 3], n_common=0, p_holm=None, difference=None) == "fails"


def test_failing_more_often_before_any_score_word():
    assert word(failures=[3, 5, 0, 5], p_fail_holm=0.01, p_holm=0.001, difference=-0.5) == "fails more often"
    # The reference failing more often is no word of the group's failures: the score test decides.
    assert word(failures=[0, 5, 3, 5], p_fail_holm=0.01, p_holm=0.001, difference=-0.5) == "better"
    assert word(failures=[3, 5, 0, 5], p_fail_holm=0.2, p_holm=0.001, difference=-0.5) == "better"


def test_one_seed_edge_then_direction():
    assert word(n_common=1, p_holm=None) == "one seed"
    assert word(at_edge=True, p_holm=0.0001, difference=-1.0) == "at edge"
    assert word(p_holm=0.01, difference=-0.3) == "better"
    assert word(p_holm=0.01, difference=0.3) == "worse"
    assert word(p_holm=0.01, difference=0.3, lower_is_better=False) == "better"


@pytest.mark.parametrize("p_equivalence, expected", [(0.009, "equivalent"), (0.011, "unresolved")])
def test_equivalence_at_the_family_level(p_equivalence, expected):
    # Family of 5: each one-sided test at 0.05 / 5 = 0.01.
    assert word(p_equivalence=p_equivalence) == expected
    assert word(p_equivalence=None) == "unresolved"


def test_every_word_is_listed():
    assert set(stats.WORDS) == {
        "fails",
        "fails more often",
        "one seed",
        "at edge",
        "better",
        "worse",
        "equivalent",
        "unresolved",
    }
