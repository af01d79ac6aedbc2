"""GLUE's metrics, so a fine-tuning score can be set beside the numbers papers report.

Every value is in percent (x100), as the GLUE leaderboard prints them, and `score(...)["score"]`
is the one number GLUE gives a task: the mean of F1 and accuracy for MRPC and QQP, the mean of
Pearson and Spearman for STS-B, Matthews' correlation for CoLA, accuracy for the rest. The
formulas are scikit-learn's and SciPy's, not ours, so they match what GLUE's own scripts compute.

Degenerate inputs are defined rather than raised or left as NaN, because a run that predicts one
class (or one number) everywhere is an ordinary early-training result, not an error:
- a correlation (Pearson, Spearman, Matthews) with a constant side, fewer than two points, or
  a non-finite value is 0.0: "no linear / rank relationship", which is also what scikit-learn
  already returns for Matthews;
- F1 with no positive label and no positive prediction is 0.0 (`zero_division=0.0`).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence

import numpy as np

from blocklab.errors import UserError

METRICS = ("accuracy", "f1", "f1_accuracy", "matthews", "pearson_spearman")
REGRESSION_METRICS = ("pearson_spearman",)


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r} (expected one of: {', '.join(METRICS)})")
    return metric


def _accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    from sklearn.metrics import accuracy_score

    return 100.0 * float(accuracy_score(gold, pred))


def _f1(pred: np.ndarray, gold: np.ndarray) -> float:
    """GLUE's F1 (MRPC, QQP) is the F1 of class 1 in a binary task. With more classes there is
    no positive class, so it is the unweighted mean of the per-class F1s (macro F1)."""
    from sklearn.metrics import f1_score

    binary = set(np.unique(gold)) | set(np.unique(pred)) <= {0, 1}
    average = "binary" if binary else "macro"
    return 100.0 * float(f1_score(gold, pred, average=average, pos_label=1, zero_division=0.0))


def _finite_or_zero(value) -> float:
    value = float(value)
    return value if math.isfinite(value) else 0.0


def _matthews(pred: np.ndarray, gold: np.ndarray) -> float:
    from sklearn.metrics import matthews_corrcoef

    with warnings.catch_warnings():  # a constant side: sklearn warns and returns 0.0, our definition too
        warnings.simplefilter("ignore")
        return 100.0 * _finite_or_zero(matthews_corrcoef(gold, pred))


def _correlations(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    from scipy.stats import pearsonr, spearmanr

    pred, gold = pred.astype(np.float64), gold.astype(np.float64)
    # SciPy returns NaN (with a warning) for a constant side and raises below two points.
    if len(pred) < 2 or not (np.isfinite(pred).all() and np.isfinite(gold).all()):
        return 0.0, 0.0
    if np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return 0.0, 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = _finite_or_zero(pearsonr(pred, gold).statistic)
        s = _finite_or_zero(spearmanr(pred, gold).statistic)
    return 100.0 * p, 100.0 * s


def score(metric: str, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """The metric's components and "score", GLUE's number for it, all in percent.

    Classification metrics take class indices; "pearson_spearman" takes numbers (a regression)."""
    check_metric(metric)
    pred, gold = np.asarray(predictions), np.asarray(labels)
    if pred.shape != gold.shape or pred.ndim != 1:
        raise ValueError(
            f"score({metric!r}): predictions {pred.shape} and labels {gold.shape} "
            "must be two 1-D sequences of the same length"
        )
    if len(gold) == 0:
        raise ValueError(f"score({metric!r}): no labels to score")
    if metric == "accuracy":
        acc = _accuracy(pred, gold)
        return {"accuracy": acc, "score": acc}
    if metric == "f1":
        f1 = _f1(pred, gold)
        return {"f1": f1, "score": f1}
    if metric == "f1_accuracy":
        f1, acc = _f1(pred, gold), _accuracy(pred, gold)
        return {"f1": f1, "accuracy": acc, "score": (f1 + acc) / 2}
    if metric == "matthews":
        mcc = _matthews(pred, gold)
        return {"matthews": mcc, "score": mcc}
    pearson, spearman = _correlations(pred, gold)
    return {"pearson": pearson, "spearman": spearman, "score": (pearson + spearman) / 2}


def majority_baseline(train_labels: Sequence, val_labels: Sequence, metric: str) -> dict[str, float]:
    """The score of a model that ignores its input: it predicts the training split's most common
    class (the smallest index on a tie, so the result is deterministic) for every validation example.

    For a regression it predicts the training mean; a constant prediction has no correlation with
    anything, so Pearson, Spearman and the score are 0.0 by this module's definition."""
    check_metric(metric)
    if len(train_labels) == 0:
        raise ValueError("majority_baseline: no training labels")
    if metric in REGRESSION_METRICS:
        guess = float(np.mean(np.asarray(train_labels, dtype=np.float64)))
    else:
        counts = Counter(train_labels)
        top = max(counts.values())
        guess = min(label for label, n in counts.items() if n == top)
    return score(metric, [guess] * len(val_labels), val_labels)
