"""A comparison's verdict word (docs/verdicts.md, "Verdicts"): the first of these that applies.

- `fails`: the group failed every seed it ran (never compared on its score).
- `fails more often`: the failure-rate test is significant after Holm's correction, the group failing more.
- `one seed`: fewer than two seeds that both sides completed: no score test (outside the family).
- `at edge`: either side's best value is at the grid's edge: the numbers stand, no word of better or worse.
- `better` / `worse`: the score test is significant after Holm's correction, in the metric's direction.
- `equivalent`: two one-sided tests against the margin, each at the family's Bonferroni level 0.05/m, and the
  family interval printed beside the word inside the margin too.
- `unresolved`: none of these; the comparison's `mde80` says what it could have missed.
"""

from __future__ import annotations

ALPHA = 0.05
WORDS = ("fails", "fails more often", "one seed", "at edge", "better", "worse", "equivalent", "unresolved")
TESTED = ("at edge", "better", "worse", "equivalent", "unresolved")  # words of a comparison with a score test


def verdict(
    *,
    failures: list[int] | None,
    n_common: int,
    p_fail_holm: float | None,
    p_holm: float | None,
    difference: float | None,
    p_equivalence: float | None,
    family_size: int,
    at_edge: bool,
    lower_is_better: bool = True,
    alpha: float = ALPHA,
    within_margin: bool = True,
) -> str:
    """The word for one comparison. `failures`: [k_group, n_group, k_ref, n_ref] (failed and decided seeds)."""
    if failures is not None:
        k, n, k_ref, n_ref = failures
        if n and k == n:
            return "fails"
        if p_fail_holm is not None and p_fail_holm < alpha and n and n_ref and k / n > k_ref / n_ref:
            return "fails more often"
    if n_common < 2 or p_holm is None or difference is None:
        return "one seed"
    if at_edge:
        return "at edge"
    if p_holm < alpha and difference != 0:
        return "better" if (difference < 0) == lower_is_better else "worse"
    if p_equivalence is not None and p_equivalence < alpha / max(1, family_size) and within_margin:
        return "equivalent"
    return "unresolved"
