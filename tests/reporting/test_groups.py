"""Seeds: a sweep's runs over seeds are averaged (mean ± sd) in the table, the curves, the heat map and the
sentences under the figures, whose numbers are worked out by hand from the fake losses (6 - slope * step)."""

import json
import math

import pytest

from blocklab.reporting import generate_report
from blocklab.reporting.groups import mean_sd
from tests.reporting.fakes import write_run

# Each builds a sweep and renders whole reports with their figures: the reporting pipeline's integration.
pytestmark = pytest.mark.slow

H = 6.0  # the fake training split's unigram entropy
# (block, warm-up) -> final training loss of seed 0 and seed 1 at step 200 (eval: +0.1)
FINAL = {("post-ln", 10): (4.0, 4.2), ("pre-ln", 0): (3.45, 3.35), ("pre-ln", 10): (3.5, 3.3)}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds") / "sweep"
    entries = []
    for lr in (1e-3, 3e-3):
        for block, warmup in [("post-ln", 0), ("post-ln", 10), ("pre-ln", 0), ("pre-ln", 10)]:
            group = f"{block}_lr{lr:g}_wu{warmup}"
            for seed in (0, 1):
                name = f"{group}_s{seed}"
                if (block, warmup) == ("post-ln", 0):  # stalled at the unigram entropy at step 100
                    write_run(
                        root / "runs" / name,
                        block,
                        0.0,
                        last_step=100,
                        status="stalled",
                        lr=lr,
                        warmup=0,
                        seed=seed,
                        unigram_entropy=H,
                    )
                else:
                    slope = (6.0 - FINAL[(block, warmup)][seed]) / 200
                    write_run(
                        root / "runs" / name,
                        block,
                        slope,
                        last_step=200,
                        lr=lr,
                        warmup=warmup,
                        seed=seed,
                        unigram_entropy=H,
                        n_params=1000 if block == "pre-ln" else 1000,
                    )
                entries.append(
                    {
                        "name": name,
                        "label": f"{group}, seed {seed}",
                        "group": group,
                        "group_label": group,
                        "seed": seed,
                        "overrides": {},
                    }
                )
    (root / "sweep.json").write_text(json.dumps({"name": "seeded", "seeds": [0, 1], "runs": entries}))
    return generate_report(root)


def test_mean_and_sample_sd():
    assert mean_sd([3.0, 3.5]) == (3.25, pytest.approx(math.sqrt(0.125)), 2)
    assert mean_sd([2.0]) == (2.0, None, 1) and mean_sd([None, float("nan")]) == (None, None, 0)


@pytest.mark.slow
def test_table_has_one_row_per_group_with_mean_and_spread(seeded):
    assert seeded.seeded and len(seeded.group_rows) == 8 and len(seeded.rows) == 16
    row = next(r for r in seeded.group_rows if r["group"] == "post-ln_lr0.001_wu10")
    assert row["n"] == 2 and row["final_loss"] == pytest.approx(4.1)
    assert row["final_loss_sd"] == pytest.approx(math.sqrt(0.02))  # (4.0, 4.2): sd = 0.1414
    assert row["final_eval_loss"] == pytest.approx(4.2)
    stalled = next(r for r in seeded.group_rows if r["group"] == "post-ln_lr0.001_wu0")
    assert stalled["status_text"] == "2 stalled at step 100" and stalled["final_loss"] == pytest.approx(6.0)
    md = seeded.md_path.read_text()
    assert "## Runs: mean ± sd over seeds" in md and "| 4.100 ± 0.141 |" in md and seeded.group_table_md in md
    assert "seed=" not in seeded.group_table_md  # the seed is what the groups average over, not a setting
    assert "Seeds: each setting was run once per seed" in md


def test_sentences_are_computed_from_the_numbers(seeded):
    captions = {f.path.name: f.caption for s in seeded.sections for f in s.figures}
    loss = captions["loss_vs_step.png"]
    assert "Post-LN at lr 0.001 6.00 (2/2 stalled) without warm-up against 4.10 with 10 steps (+1.90)" in loss
    assert "Pre-LN at lr 0.003 3.40 without warm-up against 3.40 with 10 steps (+0.00)" in loss
    assert "warm-up rescues Post-LN, Pre-LN does not need it" in loss and "4 run(s) stalled" in loss
    heat = captions["warmup_heatmap.png"]  # final training losses: 6.00 stalled against 4.10
    assert "Post-LN stalled in all" not in heat  # its warm-up cells completed
    assert (
        "Post-LN +1.90/+1.90" in heat
        and "Pre-LN +0.00/+0.00" in heat
        and "Post-LN needs warm-up most, while no warm-up costs Pre-LN at most 0.1 nats" in heat
    )
    assert (seeded.root / "figures" / "warmup_heatmap.png").stat().st_size > 10_000


def test_html_marks_stalled_groups(seeded):
    page = seeded.html_path.read_text()
    assert '<table id="groups">' in page and 'class="status-stalled" data-group="post-ln_lr0.001_wu0"' in page
    assert "unigram entropy" in page or "stalled (the loss stayed" in page


def test_heatmap_sentence_names_the_block_with_the_largest_cost():
    """Xiong-like cells: Post-LN is fine without warm-up at the low rate but fails at the high one;
    Pre-LN is slightly better without warm-up at both."""
    from pathlib import Path

    from blocklab.reporting.claims import heatmap_sentence
    from blocklab.reporting.groups import Group
    from blocklab.reporting.runs import Run

    finals = {
        ("post-ln", 5e-4, 0): 5.28,
        ("post-ln", 5e-4, 12): 5.39,
        ("post-ln", 1e-3, 0): 6.46,
        ("post-ln", 1e-3, 12): 6.61,
        ("pre-ln", 5e-4, 0): 5.09,
        ("pre-ln", 5e-4, 12): 5.14,
        ("pre-ln", 1e-3, 0): 4.69,
        ("pre-ln", 1e-3, 12): 4.74,
        ("post-ln", 1e-3, 100): 4.99,
    }
    pairs = []
    for (block, lr, w), loss in finals.items():
        run = Run(
            Path("."),
            f"{block}{lr}{w}",
            "x",
            config={"model": {"block": block}, "train": {"lr": lr, "warmup_steps": w}},
        )
        pairs.append((Group(run.name, run.name, [run], []), {"final_loss": loss, "statuses": ["completed"]}))
    for w in (0, 12):  # a block that stalls at the unigram entropy in every cell
        run = Run(
            Path("."), f"sas-p{w}", "x", config={"model": {"block": "sas-p"}, "train": {"lr": 1e-3, "warmup_steps": w}}
        )
        pairs.append((Group(run.name, run.name, [run], []), {"final_loss": 6.6, "statuses": ["stalled"]}))
    s = heatmap_sentence(pairs)
    assert "SAS-P stalled in all 2 cells" in s and "Post-LN stalled" not in s
    assert "Post-LN -0.11/+1.47" in s and "Pre-LN -0.05/-0.05" in s
    assert "Post-LN needs warm-up most, while no warm-up costs Pre-LN at most 0.1 nats" in s
