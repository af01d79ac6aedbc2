"""data/scores.py: GLUE's metrics against values worked out by hand here, GLUE's averaging, and the
defined (not raised, not NaN) results of degenerate inputs."""

import math
import warnings

import pytest

from blocklab.data.scores import METRICS, majority_baseline, score
from blocklab.errors import UserError

# A binary confusion matrix: TP 3, FN 1, FP 2, TN 2.
GOLD = [1, 1, 1, 1, 0, 0, 0, 0]
PRED = [1, 1, 1, 0, 1, 1, 0, 0]
TP, FN, FP, TN = 3, 1, 2, 2


def test_accuracy_f1_and_glue_average_of_a_known_confusion_matrix():
    acc = 100 * (TP + TN) / 8
    precision, recall = TP / (TP + FP), TP / (TP + FN)
    f1 = 100 * 2 * precision * recall / (precision + recall)  # = 2TP / (2TP + FP + FN) = 6/9
    assert f1 == pytest.approx(100 * 6 / 9)
    assert score("accuracy", PRED, GOLD) == pytest.approx({"accuracy": 62.5, "score": 62.5})
    assert score("f1", PRED, GOLD) == pytest.approx({"f1": f1, "score": f1})
    got = score("f1_accuracy", PRED, GOLD)  # MRPC / QQP: GLUE reports the mean of the two
    assert got == pytest.approx({"f1": f1, "accuracy": acc, "score": (f1 + acc) / 2})


def test_matthews_by_its_formula():
    mcc = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    assert score("matthews", PRED, GOLD) == pytest.approx({"matthews": 100 * mcc, "score": 100 * mcc})


def test_f1_of_more_than_two_classes_is_the_macro_mean():
    # class 0: F1 1; class 1: never predicted, F1 0; class 2: TP 2, FP 1 -> 4/5
    got = score("f1", [0, 2, 2, 2], [0, 1, 2, 2])
    assert got["score"] == pytest.approx(100 * (1 + 0 + 0.8) / 3)


def test_pearson_and_spearman_on_tiny_sets():
    x, y = [1.0, 2.0, 3.0], [1.0, 3.0, 2.0]
    # deviations (-1, 0, 1) and (-1, 1, 0): covariance 1, both variances 2 -> r = 1/2; ranks equal values
    assert score("pearson_spearman", x, y) == pytest.approx({"pearson": 50.0, "spearman": 50.0, "score": 50.0})
    y = [1.0, 2.0, 10.0]  # monotone (Spearman 1) but not linear
    dx, dy = [-1, 0, 1], [v - 13 / 3 for v in y]
    r = sum(a * b for a, b in zip(dx, dy)) / math.sqrt(sum(a * a for a in dx) * sum(b * b for b in dy))
    got = score("pearson_spearman", x, y)
    assert got == pytest.approx({"pearson": 100 * r, "spearman": 100.0, "score": (100 * r + 100) / 2})


def test_degenerate_inputs_are_zero_not_nan_or_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConstantInputWarning or UndefinedMetricWarning escapes
        constant = score("pearson_spearman", [2.5, 2.5, 2.5], [1.0, 2.0, 3.0])
        assert constant == {"pearson": 0.0, "spearman": 0.0, "score": 0.0}
        assert score("pearson_spearman", [1.0, 2.0], [3.0, 3.0])["score"] == 0.0  # constant labels
        assert score("pearson_spearman", [1.0], [3.0])["score"] == 0.0  # one point
        assert score("pearson_spearman", [1.0, float("nan")], [1.0, 2.0])["score"] == 0.0
        assert score("matthews", [1, 1, 1, 1], [0, 1, 0, 1])["score"] == 0.0  # one class predicted
        assert score("f1", [0, 0, 0], [0, 0, 0])["score"] == 0.0  # no positives anywhere
        assert score("f1_accuracy", [0, 0], [0, 0]) == {"f1": 0.0, "accuracy": 100.0, "score": 50.0}


def test_majority_baseline():
    assert majority_baseline([0, 1, 1], [1, 0, 1, 1], "accuracy")["score"] == 75.0
    # always 1: TP 3, FP 1, FN 0 -> F1 6/7
    assert majority_baseline([0, 1, 1], [1, 0, 1, 1], "f1")["score"] == pytest.approx(100 * 6 / 7)
    assert majority_baseline([1, 0, 1, 0], [0, 0, 1], "accuracy")["score"] == pytest.approx(200 / 3)  # tie: class 0
    assert majority_baseline([2, 2, 0], [0, 1, 0], "matthews")["score"] == 0.0
    # a regression predicts the training mean: a constant, so no correlation
    assert majority_baseline([1.0, 2.0], [0.5, 4.0, 3.0], "pearson_spearman")["score"] == 0.0


def test_bad_calls():
    assert "matthews" in METRICS
    with pytest.raises(UserError, match=r"unknown metric 'auc' \(expected one of: accuracy, f1"):
        score("auc", [0], [0])
    with pytest.raises(ValueError, match="same length"):
        score("accuracy", [0, 1], [0])
    with pytest.raises(ValueError, match="no labels"):
        score("accuracy", [], [])
