"""The report's table of secondary metrics (BLEU, fine-tuning dev scores) from verdicts.json."""

from blocklab.reporting import verdicts as RV
from blocklab.reporting.secondary_words import metric_name, secondary_table


def exp():
    comp = {
        "verdict": "better",
        "test": "paired",
        "correlation": 0.5,
        "difference": 5.1,
        "ci95": [4.5, 5.7],
        "ci_family": [4.3, 5.9],
        "p": 0.001,
        "p_holm": 0.001,
        "n": [3, 3],
        "failures": [0, 3, 0, 3],
    }
    group = {"seeds": [0, 1, 2], "scores": [25.0, 25.3, 24.9], "mean": 25.07, "sd": 0.2, "ci95": [24.5, 25.6]}
    ref = {"seeds": [0, 1, 2], "scores": [20.0, 20.5, 19.8], "mean": 20.1, "sd": 0.36, "ci95": [19.2, 21.0]}
    return {
        "reference": "pre-ln",
        "groups": {"pre-ln": {"label": "Pre-LN"}, "sas-p": {"label": "SAS-P"}},
        "comparisons": {"sas-p": {"verdict": "unresolved", "p_holm": 0.5}},
        "family_size": 3,
        "secondary": {
            "final_bleu": {
                "lower_is_better": False,
                "cap": 0.0,
                "groups": {"pre-ln": ref, "sas-p": group},
                "comparisons": {"sas-p": comp},
            }
        },
    }


def test_each_group_gets_its_mean_and_its_worded_comparison():
    table = secondary_table(exp(), "x")
    assert [r[:2] for r in table.rows] == [["BLEU", "Pre-LN"], ["BLEU", "SAS-P"]]
    assert table.rows[0][3] == "reference"
    assert table.rows[1][2] == "25.07 [24.50, 25.60] (3 completed)"
    assert table.rows[1][3] == "better: +5.10, family interval [+4.30, +5.90] (paired, 3 seeds, r 0.50), p_holm 0.001"
    assert "BLEU: zero" in table.notes[0] and "family of its own" in table.notes[0]


def test_no_secondary_metrics_no_table():
    e = exp()
    del e["secondary"]
    assert secondary_table(e, "x") is None


def test_metric_names_and_the_family_size_as_recorded():
    assert metric_name("finetune:wrong-operator") == "wrong-operator (fine-tuned dev score)"
    assert RV.family_size(RV.Verdicts({"experiments": {"e": exp()}}, None, True)) == 3
