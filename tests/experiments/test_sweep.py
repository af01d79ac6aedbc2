import json

import pytest

from blocklab.errors import UserError
from blocklab.experiments import build_sweep, load_sweep, run_sweep
from blocklab.training.checkpoint import load_checkpoint


def test_grid_expands_to_named_validated_runs():
    s = build_sweep(
        {
            "name": "t",
            "grid": {"model.block": ["pre-ln", "sas-p"], "train.lr": [1e-3, 2e-3]},
            "runs": [{"label": "post-ln, no warm-up", "model.block": "post-ln", "train.warmup_steps": 0}],
        }
    )
    assert [r.name for r in s.runs] == [
        "pre-ln_lr0.001",
        "pre-ln_lr0.002",
        "sas-p_lr0.001",
        "sas-p_lr0.002",
        "post-ln-no-warm-up",
    ]
    assert s.runs[3].config.model.block == "sas-p" and s.runs[3].config.train.lr == 0.002
    assert s.runs[4].config.train.warmup_steps == 0


def test_presets_match_their_papers():
    quick = load_sweep("quick")
    # tuning runs on seeds 5 and 6; 30 final runs follow (and a value beyond a grid edge where a best sits on one)
    assert quick.seeds == [0, 1, 2, 3, 4] and len(quick.runs) == 2 * (2 * 3 + 4 * 3)
    assert {r.config.train.seed for r in quick.runs} == {5, 6} and quick.n_runs == 36 + 30
    he = [r.config for r in quick.runs if r.experiment == "he"]
    assert all(r.config.train.stall_patience == 0 for r in quick.runs)  # both recipes have a plateau
    assert {c.model.block for c in he} == {"pre-ln", "sas-p"} and all(c.model.init == "normal" for c in he)
    assert sorted({c.train.lr for c in he}) == [1e-3, 3e-3, 1e-2]
    xq = [r.config for r in quick.runs if r.experiment == "xiong"]
    assert {(c.model.block, c.train.warmup_steps) for c in xq} == {
        (b, w) for b in ("post-ln", "pre-ln") for w in (0, 30)
    }
    assert all(
        (c.model.init, c.model.norm, c.train.optimizer, c.train.schedule, c.train.inv_sqrt_scale, c.train.beta2)
        == ("xavier", "layernorm", "adam", "inv_sqrt", 30, 0.98)
        for c in xq
    )
    assert sorted({c.train.lr for c in xq}) == [1e-3, 3e-3, 1e-2]  # 3e-2 where a best at 1e-2 extends the grid
    # fairseq's transformer_iwslt_de_en, their IWSLT14 model: an MLP twice the width (He & Hofmann's: four times)
    assert all((c.model.n_layers, c.model.d_ff) == (6, 2 * c.model.d_model) for c in xq)
    assert all(c.model.d_ff == 4 * c.model.d_model for c in he)
    xiong = [r for r in load_sweep("xiong-warmup").runs if r.config.train.optimizer == "adam"]  # SGD: test_presets
    assert {r.config.train.warmup_steps for r in xiong} == {0, 12, 100}
    assert all(r.config.train.schedule == "inv_sqrt" and r.config.train.inv_sqrt_scale == 100 for r in xiong)
    he = load_sweep("he-codeparrot").runs[0].config
    assert (
        he.model.n_layers,
        he.model.d_model,
        he.model.n_heads,
        he.model.d_ff,
        he.data.seq_len,
        he.train.batch_size,
        he.train.weight_decay,
        he.train.warmup_steps,
    ) == (18, 768, 12, 3072, 128, 128, 0.1, 2000)
    assert 1e-3 in load_sweep("he-codeparrot").tunes[None].values  # the paper's rate is on the grid
    # depth, zoo, warmup and the SGD arms: tests/experiments/test_presets.py


def test_seeds_repeat_every_run_and_group_them():
    s = build_sweep(
        {
            "name": "t",
            "seeds": [0, 3],
            "grid": {"model.block": ["pre-ln", "sas-p"]},
            "runs": [{"name": "post", "label": "Post-LN", "model.block": "post-ln"}],
            "target_run": "pre-ln",
        }
    )
    assert [r.name for r in s.runs] == ["pre-ln_s0", "pre-ln_s3", "sas-p_s0", "sas-p_s3", "post_s0", "post_s3"]
    assert [r.config.train.seed for r in s.runs] == [0, 3] * 3
    assert [r.group for r in s.runs] == ["pre-ln", "pre-ln", "sas-p", "sas-p", "post", "post"]
    assert s.runs[5].label == "Post-LN, seed 3" and s.runs[5].group_label == "Post-LN" and s.runs[5].seed == 3
    saved = s.to_json()
    assert saved["seeds"] == [0, 3] and saved["runs"][1]["group"] == "pre-ln" and saved["runs"][1]["seed"] == 3
    for bad in ([], [0, 0], [-1], "0,1", [1.5]):
        with pytest.raises(UserError, match="seeds"):
            build_sweep({"seeds": bad, "runs": [{"name": "a"}]})
    with pytest.raises(UserError, match="train.seed"):
        build_sweep({"seeds": [0, 1], "runs": [{"name": "a", "train.seed": 4}]})


def test_a_stalled_run_is_recorded_and_the_sweep_goes_on(tmp_path, overrides):
    from tests.training.test_stall import tiny, word_corpus

    iid = tiny(word_corpus(tmp_path / "iid", cyclic=False))
    spec = {"name": "t", "base": iid, "runs": [{"name": "stuck"}, {"name": "next", "train.steps": 10}]}
    seen = []
    result = run_sweep(build_sweep(spec), tmp_path / "sw", progress=False, log=seen.append)
    assert result["status"] == "completed"
    assert result["runs"]["stuck"].status == "stalled" and result["runs"]["next"].status == "completed"
    again = run_sweep(build_sweep(spec), tmp_path / "sw", progress=False, log=seen.append)
    assert any("stalled earlier, kept" in s for s in seen) and again["runs"]["stuck"].status == "stalled"


def test_bad_sweeps_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="post-ln, lr 0"):
        build_sweep({"runs": [{"label": "post-ln, lr 0", "train.lr": 0}]})
    with pytest.raises(UserError, match="grd"):
        build_sweep({"grd": {}})
    with pytest.raises(UserError, match="no runs"):
        build_sweep({"name": "empty"})
    with pytest.raises(UserError, match="target_run 'c'"):
        build_sweep({"runs": [{"name": "a"}, {"name": "b"}], "target_run": "c"})
    with pytest.raises(UserError, match="share the name"):
        build_sweep({"runs": [{"name": "a"}, {"name": "a"}]})
    (tmp_path / "s.toml").write_text("name = [")
    with pytest.raises(UserError, match="TOML"):
        load_sweep(str(tmp_path / "s.toml"))


def test_sweep_records_divergence_goes_on_and_resumes(tmp_path, overrides):
    spec = {
        "name": "t",
        "base": overrides,
        "runs": [
            {
                "name": "boom",
                "model.block": "post-ln",
                "model.norm": "layernorm",
                "model.init": "xavier",
                "model.d_model": 64,
                "model.n_layers": 4,
                "train.optimizer": "adam",
                "train.lr": 1.0,
                "train.warmup_steps": 0,
                "train.grad_clip": 0.0,
                "train.schedule": "constant",
            },
            {"name": "fine"},
        ],
    }
    sweep = build_sweep(spec, {"train": {"steps": 8}})
    result = run_sweep(sweep, tmp_path / "sw", progress=False, log=lambda *a: None)
    assert result["status"] == "completed"
    assert result["runs"]["boom"].status == "diverged" and result["runs"]["fine"].status == "completed"
    saved = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [r["name"] for r in saved["runs"]] == ["boom", "fine"]
    # a second invocation keeps both results; a run killed half-way is resumed from its checkpoint
    fine = tmp_path / "sw" / "runs" / "fine"
    (fine / "summary.json").unlink()
    seen = []
    again = run_sweep(build_sweep(spec, {"train": {"steps": 8}}), tmp_path / "sw", progress=False, log=seen.append)
    assert any("diverged earlier, kept" in s for s in seen) and any("resuming" in s for s in seen)
    assert again["runs"]["fine"].status == "completed" and load_checkpoint(fine / "checkpoints")["step"] == 8


def test_sweep_dir_must_match(tmp_path, overrides):
    sweep = build_sweep({"name": "t", "base": overrides, "runs": [{"name": "a"}]}, {"train": {"steps": 2}})
    run_sweep(sweep, tmp_path / "sw", progress=False, log=lambda *a: None)
    other = build_sweep({"name": "u", "base": overrides, "runs": [{"name": "b"}]})
    with pytest.raises(UserError, match="holds the sweep"):
        run_sweep(other, tmp_path / "sw", progress=False, log=lambda *a: None)


TWO = {"he": {"title": "He & Hofmann", "target_run": "pre-ln"}, "xiong": {"title": "Xiong", "target_run": "x-pre"}}


def two_experiments(**changes) -> dict:
    spec = {
        "name": "t",
        "experiments": TWO,
        "seeds": [0, 1],
        "runs": [
            {"name": "pre-ln", "model.block": "pre-ln", "experiment": "he"},
            {"name": "sas", "model.block": "sas", "experiment": "he"},
            {"name": "x-pre", "model.block": "pre-ln", "train.warmup_steps": 0, "experiment": "xiong"},
        ],
    }
    return {**spec, **changes}


def test_experiments_tag_runs_and_reach_the_report(tmp_path):
    from blocklab.reporting import load_runs
    from tests.reporting.fakes import write_run

    s = build_sweep(two_experiments())
    assert [(r.name, r.experiment) for r in s.runs] == [
        ("pre-ln_s0", "he"),
        ("pre-ln_s1", "he"),
        ("sas_s0", "he"),
        ("sas_s1", "he"),
        ("x-pre_s0", "xiong"),
        ("x-pre_s1", "xiong"),
    ]
    assert s.experiments == {
        "he": {"title": "He & Hofmann", "description": "", "target_run": "pre-ln"},
        "xiong": {"title": "Xiong", "description": "", "target_run": "x-pre"},
    }
    saved = s.to_json()  # what run_sweep writes to DIR/sweep.json, which the report reads
    assert saved["experiments"] == s.experiments and saved["runs"][4]["experiment"] == "xiong"
    (tmp_path / "sweep.json").write_text(json.dumps(saved))
    for r in s.runs:
        write_run(tmp_path / "runs" / r.name, r.config.model.block, 0.01, last_step=20, steps=20)
    runs, sweep = load_runs(tmp_path)
    assert [r.experiment for r in runs] == ["he"] * 4 + ["xiong"] * 2 and sweep["experiments"] == s.experiments
    grid = build_sweep(
        {
            "name": "g",
            "experiments": {"only": {}},
            "grid": {"model.block": ["pre-ln", "sas"]},
            "grid_experiment": "only",
        }
    )
    assert {r.experiment for r in grid.runs} == {"only"} and grid.experiments["only"]["title"] == "only"
    assert build_sweep({"runs": [{"name": "a"}]}).to_json()["experiments"] is None


def test_quick_holds_two_experiments_each_with_its_reference():
    quick = load_sweep("quick")
    assert list(quick.experiments) == ["he", "xiong"] and quick.target_run is None
    assert {r.group for r in quick.runs if r.experiment == "he"} == {"pre-ln", "sas-p"}
    assert all(r.name.startswith("xiong_") == (r.experiment == "xiong") for r in quick.runs)
    assert quick.experiments["he"]["target_run"] == "pre-ln"
    assert quick.experiments["xiong"]["target_run"] == "xiong_pre-ln"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"experiments": {}}, "experiments must be a non-empty table"),
        ({"experiments": ["he"]}, "experiments must be a non-empty table"),
        ({"experiments": {**TWO, "x y": {}}}, "experiment name 'x y' is not valid"),
        ({"experiments": {**TWO, "_x": {}}}, "experiment name '_x' is not valid"),
        ({"experiments": {**TWO, "he": "Pre-LN"}}, "experiments.he must be a table"),
        ({"experiments": {**TWO, "he": {"titel": "x"}}}, "unknown field 'titel' in experiments.he"),
        ({"experiments": {**TWO, "he": {"title": 3}}}, "experiments.he.title = 3 must be a string"),
        (
            {"experiments": {**TWO, "he": {"target_run": "x-pre"}}},
            "experiments.he.target_run 'x-pre' is not a run of that experiment; its runs: pre-ln, sas",
        ),
        ({"experiments": {**TWO, "more": {}}}, "experiment 'more' has no runs"),
        ({"target_run": "pre-ln"}, "target_run and \\[experiments\\] do not go together"),
        ({"grid_experiment": "he"}, "grid_experiment = 'he' but the sweep has no \\[grid\\]"),
        (
            {"grid": {"model.block": ["sas-p", "post-ln"]}},
            "run 'sas-p' names no experiment; give it experiment = NAME, one of he, xiong",
        ),
        (
            {"grid": {"model.block": ["sas-p", "post-ln"]}, "grid_experiment": "hee"},
            "run 'sas-p': experiment 'hee' is not one of the sweep's experiments: he, xiong",
        ),
    ],
)
def test_bad_experiments_are_one_line_errors(changes, message):
    with pytest.raises(UserError, match=message) as e:
        build_sweep(two_experiments(**changes))
    assert "\n" not in str(e.value)


def test_an_experiment_tag_needs_an_experiments_table():
    with pytest.raises(UserError, match="run 'a' names experiment 'he', but the sweep has no \\[experiments\\]"):
        build_sweep({"runs": [{"name": "a", "label": "a", "experiment": "he"}]})


def test_a_block_only_knob_in_a_sweeps_base_is_refused_for_the_run_whose_block_lacks_it():
    """The base applies to every run: hc_streams there would be silently ignored by Pre-LN, so the sweep names
    the run and the blocks the knob belongs to; set on the hyper-connections run alone, it plans."""
    runs = [{"name": "pre-ln", "model.block": "pre-ln"}, {"name": "hc", "model.block": "hyper-connections"}]
    with pytest.raises(
        UserError, match=r"run 'pre-ln': hc_streams=2 does not apply to block 'pre-ln'; it applies to: "
    ):
        build_sweep({"name": "t", "base": {"model": {"hc_streams": 2}}, "runs": runs})
    runs[1]["model.hc_streams"] = 2
    s = build_sweep({"name": "t", "runs": runs})
    assert [r.config.model.hc_streams for r in s.runs] == [4, 2]
