"""The optimizers preset end to end at no training cost: its plan (eight groups under AdamW and Muon, He & Hofmann's
recipe, the GPU overlay), every cell's model stepping under its optimizer at a toy size, and the sweep judged from
stored outcomes, through choose_best, the final runs, verdicts.json's claims and interactions, and the summary."""

import json

import pytest
import torch

from blocklab import build_model
from blocklab.experiments import load_sweep
from blocklab.experiments.verdicts import choose_best, compute_verdicts, extension_runs
from blocklab.optimizers import MuonAdamW
from blocklab.training.optim import make_optimizer

GROUPS = ("pre-ln", "post-ln", "post-ln_wu0", "sas-p", "dyt", "ngpt", "hybridnorm", "peri-ln")
LEVELS = ("adamw", "muon")


@pytest.mark.parametrize("name", ["optimizers", "optimizers-gpu"])
def test_the_plan_crosses_eight_groups_with_adamw_and_muon_in_he_and_hofmanns_recipe(name):
    s = load_sweep(name)
    assert list(s.experiments) == ["he-adamw", "he-muon"] and s.final_seeds() == [0, 1, 2, 3, 4]
    assert {g.name for g in s.groups} == {f"{g}-{o}" for g in GROUPS for o in LEVELS}
    assert s.experiments["he-muon"]["target_run"] == "pre-ln-muon"
    cfgs = {r.group: r.config for r in s.runs}
    assert all(cfgs[f"{g}-{o}"].train.optimizer == o for g in GROUPS for o in LEVELS)
    values = s.tune_of(s.groups[0]).values
    assert len(values) == 4 and len(s.runs) == len(cfgs) * len(values) * 2  # two tuning seeds per value
    assert {r.seed for r in s.runs} == {5, 6}
    # every cell differs from its twin under the other optimizer in the optimizer alone
    for g in GROUPS:
        a, m = (cfgs[f"{g}-{o}"].to_dict() for o in LEVELS)
        assert {k for k in a["train"] if a["train"][k] != m["train"][k]} == {"optimizer"} and a["model"] == m["model"]
    # He & Hofmann's recipe (nGPT on its own: no weight decay, no warm-up); Post-LN with it and without warm-up
    recipe = {(c.model.init, c.train.schedule, c.train.weight_decay, c.train.grad_clip) for c in cfgs.values()}
    assert recipe == {("normal", "linear", 0.1, 1.0), ("normal", "linear", 0.0, 1.0)}
    assert {c.model.norm for g, c in cfgs.items() if not g.startswith("dyt")} == {"rmsnorm"}
    assert {g for g, c in cfgs.items() if c.train.weight_decay == 0.0} == {"ngpt-adamw", "ngpt-muon"}
    warm = {g: cfgs[f"{g}-muon"].train.warmup_steps for g in GROUPS}
    assert warm["post-ln_wu0"] == warm["ngpt"] == 0 and warm["post-ln"] == warm["pre-ln"] > 0
    assert cfgs["dyt-muon"].model.norm == "dyt" and cfgs["dyt-muon"].model.block == "pre-ln"
    assert all(c.train.stall_patience == 0 and c.train.qk_clip is None for c in cfgs.values())
    size = {(c.model.d_model, c.data.seq_len, c.train.steps) for c in cfgs.values()}
    assert size == {"optimizers": {(64, 64, 150)}, "optimizers-gpu": {(256, 128, 300)}}[name]


@pytest.mark.parametrize("level", LEVELS)
def test_every_cell_builds_its_model_and_steps_under_its_optimizer_at_a_toy_size(level):
    s = load_sweep(
        "optimizers",
        {"model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "vocab_size": 300}, "data": {"vocab_size": 300}},
    )
    cells = {r.group: r.config for r in s.runs if r.config.train.optimizer == level}
    assert len(cells) == len(GROUPS)
    for group, cfg in cells.items():
        torch.manual_seed(0)
        cfg.model.max_seq_len = 8
        model = build_model(cfg.model)
        opt = make_optimizer(model, cfg.train)
        assert isinstance(opt, MuonAdamW) == (level == "muon"), group
        before = [p.detach().clone() for p in model.parameters()]
        ids = torch.randint(0, 300, (2, 8))
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        model.after_optimizer_step()
        assert torch.isfinite(loss) and any(not p.equal(q) for p, q in zip(model.parameters(), before)), group


def write(out, name, score, status="completed"):
    d = out / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    s = {"status": status, "final_eval_loss": score, "unigram_eval_loss": 6.0, "n_params": 1000, "tokens": 1}
    (d / "summary.json").write_text(json.dumps(s))


CURVE = {0.001: 4.6, 0.003: 4.4, 0.01: 4.5, 0.03: 4.8}  # every cell's best inside the grid, at 3e-3
EFFECT = {"sas-p": -0.01, "dyt": 0.02, "ngpt": -0.3, "post-ln": 0.1, "post-ln_wu0": 0.15}


def judged(tmp_path, post_ln_wu0_muon_fails_at_top: bool) -> dict:
    """The preset judged from stored outcomes: under Muon, Post-LN without warm-up diverges at 3e-2 (or trains
    there); nGPT is better than Pre-LN under AdamW and worse under Muon, on every seed."""
    s = load_sweep("optimizers")
    for r in s.tuning_runs:
        fails = r.group == "post-ln_wu0-muon" and r.value == 0.03 and post_ln_wu0_muon_fails_at_top
        write(tmp_path, r.name, CURVE[r.value], "diverged" if fails else "completed")
    best = choose_best(s, tmp_path)
    assert set(best.values()) == {0.003} and not extension_runs(s, tmp_path)  # every best inside the grid
    finals = s.final_runs(best)
    seed_effect = {0: 0.0, 1: 0.1, 2: -0.05, 3: 0.07, 4: -0.02}
    for r in finals:
        base, level = r.group.rsplit("-", 1)
        effect = EFFECT.get(base, 0.0)
        if base == "ngpt" and level == "muon":
            effect = +0.3
        write(tmp_path, r.name, 4.0 + seed_effect[r.seed] + effect + 0.003 * ((r.seed + len(base)) % 3))
    return compute_verdicts(s, tmp_path, finals)


def test_the_sweep_judged_asks_each_claim_under_its_optimizer_and_tests_every_interaction(tmp_path):
    from blocklab.reporting.summary import summary_markdown

    v = judged(tmp_path, post_ln_wu0_muon_fails_at_top=True)
    claims = {(c["experiment"], c["rule_id"], c["group"]): c["status"] for c in v["claims"]}
    assert claims == {
        ("he-adamw", "he-per-step", "sas-p-adamw"): "holds",
        ("he-adamw", "norm-free-dyt", "dyt-adamw"): "holds",
        ("he-muon", "he-per-step-muon", "sas-p-muon"): "holds",
        ("he-muon", "xiong-warmup-muon", "post-ln_wu0-muon"): "holds",
    }
    muon = next(c for c in v["claims"] if c["rule_id"] == "he-per-step-muon")
    assert muon["claim"].startswith("Under Muon, SAS-P trains as fast per step as Pre-LN")
    groups = v["experiments"]["he-muon"]["groups"]
    assert groups["post-ln_wu0-muon"]["trainable"] == [0.001, 0.01] and groups["post-ln-muon"]["trainable"][1] == 0.03
    assert all(g["facts"]["optimizer"] == "muon" for g in groups.values())
    found = v["interactions"]["he"]
    assert set(found) == set(GROUPS) - {"pre-ln"}
    assert found["ngpt"]["verdict"] == "flips" and found["sas-p"]["interaction"] == pytest.approx(0.0, abs=1e-9)
    md = summary_markdown(v)
    assert "he: interactions with train.optimizer" in md and "xiong-warmup-muon" in md


def test_both_post_ln_ranges_reaching_the_grids_top_leave_the_warmup_claim_under_muon_open(tmp_path):
    v = judged(tmp_path, post_ln_wu0_muon_fails_at_top=False)
    (c,) = [c for c in v["claims"] if c["rule_id"] == "xiong-warmup-muon"]
    assert c["status"] == "inconclusive" and "grid's largest rate" in c["why"]
