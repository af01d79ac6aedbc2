"""verdicts.json's record: every committed file reads back and writes back byte for byte, older files and unknown
fields stay readable, damaged ones say why, and docs/verdicts.md lists exactly the records' fields."""

import json
import re
from pathlib import Path

import pytest

from blocklab.verdicts_record import (
    RECORDS,
    Claim,
    Comparison,
    Experiment,
    Group,
    NotVerdicts,
    VerdictsFile,
    read_verdicts,
    verdicts_text,
    write_verdicts,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted(p.parent for p in (ROOT / "results").glob("**/verdicts.json"))
DOCS = ROOT / "docs" / "verdicts.md"


@pytest.mark.parametrize("folder", RESULTS, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_a_committed_file_reads_back_and_writes_back_byte_for_byte(folder, tmp_path):
    v = read_verdicts(folder)
    write_verdicts(tmp_path, v)
    assert (tmp_path / "verdicts.json").read_bytes() == (folder / "verdicts.json").read_bytes()
    for exp in v.experiment_records.values():
        assert isinstance(exp.groups[exp.reference], Group) and not exp.extra
        assert all(isinstance(c, Comparison) and c.verdict for c in exp.comparisons.values())
    assert all(isinstance(c, Claim) and c.status for c in v.claims) and not v.extra


def test_the_records_have_every_field_of_the_committed_files():
    """Nothing of a file this blocklab writes lands in `extra`: every field is declared."""
    unknown = set()

    def walk(x):
        if isinstance(x, tuple(RECORDS)):
            unknown.update(f"{type(x).__name__}.{k}" for k in x.extra)
            for f in x.FIELDS:
                walk(getattr(x, f.name))
        elif isinstance(x, (list, dict)):
            for item in x.values() if isinstance(x, dict) else x:
                walk(item)

    for folder in RESULTS:
        walk(read_verdicts(folder))
    assert unknown == set()


def old_file() -> dict:
    """A verdicts.json of an older blocklab (no format, failed runs scored at the cap, no contrasts), with a field
    of a newer one."""
    group = {"label": "Pre-LN", "seeds": [0, 1], "statuses": ["completed"] * 2, "scores": [4.0, 4.1], "capped": [0, 0]}
    exp = {
        "metric": "final_eval_loss",
        "reference": "pre-ln",
        "groups": {"pre-ln": group},
        "comparisons": {"post-ln": {"verdict": "indistinguishable"}},
        "from_a_newer_blocklab": {"x": 1},
    }
    return {"sweep": "old", "experiments": {"e": exp}, "claims": [{"paper": "P", "status": "holds"}]}


def test_an_older_file_reads_with_missing_fields_as_none_and_unknown_ones_kept(tmp_path):
    (tmp_path / "verdicts.json").write_text(json.dumps(old_file(), indent=2) + "\n")
    v = read_verdicts(tmp_path)
    exp = v.experiments["e"]
    assert v.format is None and v.interactions is None and exp.contrasts is None and exp.margin is None
    g = exp.groups["pre-ln"]
    assert g.scores == [4.0, 4.1] and g.raw is None and g.facts is None and g.extra == {"capped": [0, 0]}
    assert exp.comparisons["post-ln"].verdict == "indistinguishable" and exp.comparisons["post-ln"].p is None
    assert exp.extra == {"from_a_newer_blocklab": {"x": 1}} and v.claims[0].why is None
    assert verdicts_text(v) == (tmp_path / "verdicts.json").read_text()


def test_fields_set_after_reading_are_written_after_the_ones_read():
    exp = Experiment.from_dict({"reference": "a", "groups": {}})
    exp.family_size, exp.extra["later"] = 3, True
    assert list(exp.to_dict()) == ["reference", "groups", "family_size", "later"]
    # A record made in code writes its fields in the declared order, leaving out those it does not have.
    assert list(Comparison(verdict="better", p=0.01, test="paired").to_dict()) == ["test", "p", "verdict"]


def test_an_entry_of_the_wrong_shape_is_kept_as_it_was_read():
    v = VerdictsFile.from_dict({"experiments": {"e": "not a table", "f": {"groups": [1]}}, "claims": [1]})
    assert v.experiments["e"] == "not a table" and v.experiments["f"].groups == [1] and v.claims == [1]
    assert list(v.experiment_records) == ["f"] and v.claim_records == []
    assert v.to_dict() == {"experiments": {"e": "not a table", "f": {"groups": [1]}}, "claims": [1]}


@pytest.mark.parametrize(("content", "error"), [("{not json", ValueError), ("[1]", NotVerdicts), ("{}", NotVerdicts)])
def test_a_damaged_or_foreign_file_says_why(tmp_path, content, error):
    (tmp_path / "verdicts.json").write_text(content)
    with pytest.raises(error):
        read_verdicts(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_verdicts(tmp_path / "nowhere")


def test_the_verdicts_docs_list_exactly_the_records_fields():
    doc = DOCS.read_text()
    section = doc[doc.index("## The record's fields") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    documented = {}
    for part in section.split("\n### ")[1:]:
        name = re.match(r"`(\w+)`", part).group(1)
        documented[name] = [_cells(row) for row in part.splitlines() if row.startswith("| `")]
    layer = {True: "raw", False: "derived"}
    assert documented == {r.__name__: [(f.name, layer[f.metadata["raw"]]) for f in r.FIELDS] for r in RECORDS}


def _cells(row: str) -> tuple[str, str]:
    """(field, layer) of a table row `| `name` | layer | meaning |`."""
    cells = row.split("|")
    return re.fullmatch(r"\s*`(\w+)`\s*", cells[1]).group(1), cells[2].strip()
