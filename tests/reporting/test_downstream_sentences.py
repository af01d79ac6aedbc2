"""The downstream section's sentences: the step at which one run reaches another's final score."""

from blocklab.reporting.downstream import reach_sentences


def test_reach_is_the_first_checkpoint_at_or_above_the_other_final_score():
    curves = {"Pre-LN": [(100, 60.0), (200, 70.0), (400, 72.0)], "Post-LN": [(100, 55.0), (200, 61.0), (400, 69.0)]}
    out = reach_sentences(curves, baseline=50.0)
    assert "Pre-LN reaches Post-LN's final score (69.0) at step 200 (50% of Post-LN's 400 steps)." in out
    assert "Post-LN reaches Pre-LN's final score (72.0) at none of its checkpoints." in out


def test_a_final_score_at_the_majority_baseline_is_nothing_to_reach():
    curves = {"A": [(100, 50.0), (200, 50.0)], "B": [(100, 51.0), (200, 56.0)]}
    out = reach_sentences(curves, baseline=50.0)
    assert out[0].startswith("At or below the majority-class baseline (50.0) at the end: A")
    assert not any("reaches A's" in s for s in out)
