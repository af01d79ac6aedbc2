"""A family of a dozen blocks stays readable: every block its own colour, every family its own line style,
legends and tables ordered by family, then block, the tables grouped by family."""

from pathlib import Path

import pytest

from blocklab.blocks import REGISTRY
from blocklab.registry import FAMILIES
from blocklab.reporting import generate_report
from blocklab.reporting.figures import FAMILY_STYLES, block_colour, run_styles
from blocklab.reporting.runs import Run, family_order
from tests.reporting.fakes import write_run


def run(name: str, block: str) -> Run:
    return Run(Path(name), name, name, config={"model": {"block": block}})


def first_of_each_family() -> dict[str, str]:
    out = {}
    for block, spec in REGISTRY.items():
        out.setdefault(spec.family, block)
    return out


def test_every_block_has_its_own_colour_and_unknown_blocks_a_free_one():
    colours = [block_colour(b).lower() for b in REGISTRY]
    assert len(set(colours)) == len(colours) == len(REGISTRY)
    assert block_colour("not-a-block").lower() not in colours


def test_families_draw_in_different_line_styles():
    assert set(FAMILY_STYLES) == set(FAMILIES) and len(set(FAMILY_STYLES.values())) == len(FAMILIES)
    firsts = first_of_each_family()
    styles = run_styles([run(b, b) for b in firsts.values()])
    by_family = {fam: styles[block][1] for fam, block in firsts.items()}
    assert by_family["classic"] == "-" and by_family["simplified"] == "--"
    assert len(set(by_family.values())) == len(by_family) >= 3
    # every block of one family shares its style; colours tell the blocks apart
    simplified = [b for b, s in REGISTRY.items() if s.family == "simplified"]
    styles = run_styles([run(b, b) for b in simplified])
    assert {styles[b][1] for b in simplified} == {"--"} and len({styles[b][0] for b in simplified}) == len(simplified)


def test_runs_of_one_block_still_differ():
    """Two warm-ups, learning rates or seeds of one block: one colour, distinct styles, then shades."""
    runs = [run(f"pre-ln_{k}", "pre-ln") for k in range(6)] + [run(f"sas_{k}", "sas") for k in range(2)]
    styles = run_styles(runs)
    assert len({styles[r.name] for r in runs}) == len(runs)
    assert [styles[f"pre-ln_{k}"][1] for k in range(4)] == ["-", "--", "-.", ":"]
    assert [styles[f"sas_{k}"][1] for k in range(2)] == ["--", "-."]  # from the family's style on


def test_family_order_sorts_by_family_then_registry_order_and_keeps_a_blocks_runs_in_order():
    runs = [run("a", "sas-p"), run("b", "mystery"), run("c", "pre-ln"), run("d", "sas-p"), run("e", "post-ln")]
    if "rezero" in REGISTRY:
        runs.insert(1, run("f", "rezero"))
    names = [r.name for r in family_order(runs)]
    expected = ["e", "c", "a", "d"] + (["f"] if "rezero" in REGISTRY else []) + ["b"]
    assert names == expected


@pytest.mark.slow
def test_tables_group_rows_by_family(tmp_path):
    root = tmp_path / "sweep"
    for block in ("sas-p", "pre-ln", "sas", "post-ln"):
        write_run(root / "runs" / block, block, 0.01, last_step=50, steps=50)
    report = generate_report(root)
    lines = report.table_md.splitlines()
    assert lines[0].split("|")[1:4] == [" run ", " block ", " family "]
    assert [ln.split("|")[2].strip() for ln in lines[2:]] == ["post-ln", "pre-ln", "sas", "sas-p"]
    assert [ln.split("|")[3].strip() for ln in lines[2:]] == ["classic", "classic", "simplified", "simplified"]
    page = report.html_path.read_text()
    assert page.count('family-start"') == 1 and 'data-family="simplified"' in page
