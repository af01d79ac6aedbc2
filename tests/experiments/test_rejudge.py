"""`blocklab report DIR --rejudge`: verdicts recomputed from the per-seed outcomes verdicts.json stores. Every
committed results folder is up to date with the current rules (rejudging it changes no byte), a rejudge is
idempotent, and a file written before failures were counted apart is read as what it meant."""

import json
import shutil
from pathlib import Path

import pytest

from blocklab.experiments.rejudge import raw_layer, rejudge, upgrade

RESULTS = sorted(p.parent for p in (Path(__file__).resolve().parents[2] / "results").glob("**/verdicts.json"))


@pytest.mark.parametrize("folder", RESULTS, ids=lambda p: p.name)
def test_a_committed_results_folder_is_judged_under_the_current_rules(folder, tmp_path):
    committed = (folder / "verdicts.json").read_text()
    for name in ("verdicts.json", "sweep.json"):
        if (folder / name).is_file():
            shutil.copy(folder / name, tmp_path / name)
    new, changes = rejudge(tmp_path)
    assert json.dumps(new, indent=2) + "\n" == committed, f"rejudge {folder} and commit it: {changes[:5]}"
    assert changes == []


def test_rejudging_twice_writes_the_same_bytes(tmp_path):
    folder = next(p for p in RESULTS if p.name.startswith("zoo"))
    for name in ("verdicts.json", "sweep.json"):
        shutil.copy(folder / name, tmp_path / name)
    first, _ = rejudge(tmp_path)
    (tmp_path / "verdicts.json").write_text(json.dumps(first, indent=2) + "\n")
    second, changes = rejudge(tmp_path)
    assert json.dumps(second, indent=2) == json.dumps(first, indent=2) and changes == []
    assert raw_layer(second) == raw_layer(first)


def old_file():
    """A verdicts.json as blocklab wrote it before failures were counted apart: failed runs scored at the cap."""
    curve = [
        {"value": 1e-3, "seeds": [3], "scores": [4.5], "statuses": ["completed"], "capped": [False]},
        {"value": 1e-2, "seeds": [3], "scores": [4.0], "statuses": ["completed"], "capped": [False]},
    ]
    groups = {
        "pre-ln": {
            "label": "Pre-LN",
            "settings": {},
            "curve": curve,
            "seeds": [0, 1, 2],
            "statuses": ["completed"] * 3,
            "scores": [4.0, 4.02, 4.01],
            "n_params": 1000,
        },
        "post-ln": {
            "label": "Post-LN",
            "settings": {},
            "curve": curve,
            "seeds": [0, 1, 2],
            "statuses": ["stalled", "completed", "stalled"],
            "scores": [6.0, 6.0, 6.0],
            "n_params": 1000,
        },
    }
    exp = {
        "metric": "final_eval_loss",
        "lower_is_better": True,
        "tuned": "train.lr",
        "values": [1e-3, 1e-2],
        "tuning_seeds": [3],
        "reference": "pre-ln",
        "tolerance": 0.1,
        "cap": 6.0,
        "groups": groups,
        "comparisons": {"post-ln": {"verdict": "indistinguishable"}},
    }
    return {"sweep": "old", "experiments": {"e": exp}, "claims": []}


def test_an_older_file_is_read_as_failures_counted_apart(tmp_path):
    (tmp_path / "verdicts.json").write_text(json.dumps(old_file()))
    new, changes = rejudge(tmp_path)
    g = new["experiments"]["e"]["groups"]["post-ln"]
    assert g["statuses"] == ["stalled", "plateau", "stalled"] and g["scores"] == [None] * 3 and g["failed"] == 3
    c = new["experiments"]["e"]["comparisons"]["post-ln"]
    assert c["verdict"] == "fails" and changes == ["e: Post-LN: indistinguishable -> fails"]
    assert new["experiments"]["e"]["margin"] == 0.1 and new["format"] == 2
    assert upgrade(old_file(), None, tmp_path)["experiments"]["e"]["groups"]["post-ln"]["facts"] == {}
