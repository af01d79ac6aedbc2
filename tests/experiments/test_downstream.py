"""Sweeps with a fine-tuning stage: the presets, the stage's validation, a tiny sweep end to end with
its report section (He & Hofmann's table; Xiong et al.'s score along pre-training)."""

import dataclasses
import json

import pytest

from blocklab.errors import ConfigError, UserError
from blocklab.experiments import build_sweep, load_sweep, run_sweep
from blocklab.experiments.downstream import FIELDS, FinetuneStage, parse_stage
from blocklab.reporting.report import build_report
from blocklab.settings import KEY


def test_the_downstream_presets_are_the_papers_settings():
    he = load_sweep("he-bert")
    blocks = list(dict.fromkeys(r.config.model.block for r in he.runs))
    assert blocks == ["pre-ln", "parallel", "v-skipinit", "sas", "sas-p", "sas-p-nonorm"]
    assert {r.config.train.lr for r in he.runs} == {3e-4, 1e-3, 3e-3}  # each block at its own best rate
    assert all(r.config.model.task == "mlm" for r in he.runs)
    assert {
        r.config.model.block: r.config.model.resolved("beta_ff")
        for r in he.runs
        if r.config.model.resolved("beta_ff") is not None
    } == {b: 0.05 for b in blocks[2:]}
    assert len({r.config.train.steps for r in he.runs}) == 1  # equal steps
    assert he.finetune.seeds == [0, 1, 2] and len(he.finetune.tasks) == 5 and he.reference["pre-ln"]["score"]
    assert load_sweep("he-bert-gpu").finetune.epochs == 5
    xiong = {r.group: r.config.train for r in load_sweep("xiong-bert").runs if r.config.train.lr == 3e-4}
    assert (xiong["pre-ln_wu0"].warmup_steps, xiong["pre-ln_wu0"].schedule) == (0, "linear")
    assert {r.config.train.lr for r in load_sweep("xiong-bert").runs} == {1e-4, 3e-4, 1e-3}  # BERT's, Xiong's
    assert xiong["post-ln_warmup"].warmup_steps > 0 and xiong["post-ln_wu0"].warmup_steps == 0
    stage = load_sweep("xiong-bert").finetune
    assert stage.steps and all(s % xiong["pre-ln_wu0"].checkpoint_every == 0 for s in stage.steps)
    assert all(t.keep_checkpoints == 0 for t in xiong.values())  # every checkpoint along the way is kept


@pytest.mark.parametrize(
    "stage,message",
    [
        ({"tasks": []}, "finetune.tasks"),
        ({"tasks": ["wrong-operator"], "seeds": [0, 0]}, "finetune.seeds"),
        ({"tasks": ["wrong-operator"], "epochs": 0}, "finetune.epochs"),
        ({"tasks": ["wrong-operator"], "lr": 1}, "unknown finetune field 'lr'"),
    ],
)
def test_bad_finetune_stages_are_refused(stage, message):
    spec = {"name": "t", "base": {"model": {"task": "mlm"}}, "grid": {"model.block": ["pre-ln"]}, "finetune": stage}
    with pytest.raises(UserError, match=message):
        build_sweep(spec)


def test_every_stage_field_is_a_setting_with_a_one_line_help():
    for f in dataclasses.fields(FinetuneStage):
        assert f.metadata[KEY].help.strip() and "\n" not in f.metadata[KEY].help
    assert set(FIELDS) == {"tasks", "seeds", "epochs", "steps", "keep_checkpoints"}  # the table's own keys


@pytest.mark.parametrize(
    "stage, message",
    [
        ({"epochs": -1}, "finetune.epochs=-1 is not valid; it must be a positive number"),
        ({"epochs": "3"}, "finetune.epochs='3' is not valid; it must be a positive number"),
        ({"steps": [0, 100]}, "finetune.steps=[0, 100] is not valid; it must be a non-empty list of distinct positive"),
        ({"seeds": [0, -1]}, "finetune.seeds=[0, -1] is not valid; it must be a non-empty list of distinct integers"),
        ({"tasks": ["wrong-operator", ""]}, "finetune.tasks=['wrong-operator', ''] is not valid; it must be a"),
        ({"keep_checkpoints": "no"}, "finetune.keep_checkpoints='no' is not valid; choose one of: True, False"),
    ],
)
def test_bad_stage_values_are_one_line_naming_the_field(stage, message):
    with pytest.raises(ConfigError) as e:
        parse_stage({"tasks": ["wrong-operator"], **stage})
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_stage_keeps_its_defaults_and_its_dotted_overrides():
    stage = parse_stage({"tasks": ["wrong-operator"], "epochs": 3, "train.lr": 1e-3, "data.max_examples": 50})
    assert stage == FinetuneStage(
        ["wrong-operator"], epochs=3.0, overrides={"train": {"lr": 1e-3}, "data": {"max_examples": 50}}
    )
    assert (stage.seeds, stage.steps, stage.keep_checkpoints) == ([0], None, False) and stage.epochs == 3.0
    assert stage.to_json()["train.lr"] == 1e-3
    with pytest.raises(UserError, match="finetune.tasks is missing"):
        parse_stage({"seeds": [0]})


def test_a_finetune_stage_needs_mlm_runs():
    with pytest.raises(UserError, match="pre-trains mlm runs"):
        build_sweep({"name": "t", "grid": {"model.block": ["pre-ln"]}, "finetune": {"tasks": ["wrong-operator"]}})


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.jsonl"
    path.write_text(
        "".join(
            json.dumps({"sentence": f"x = {'True' if i % 2 else 'None'}", "label": i % 2}) + "\n" for i in range(80)
        )
    )
    return str(path)


def _spec(corpus_dir, toy_task, steps=None):
    stage = {"tasks": [toy_task], "seeds": [0, 1], "epochs": 1, "train.lr": 1e-3}
    if steps:
        stage["steps"] = steps
    return {
        "name": "tiny-downstream",
        "target_run": "pre-ln",
        "reference": {"pre-ln": {"score": "78.9 ± .7", "params": "120M", "speed": "1x"}},
        "base": {
            "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
            "model": {"task": "mlm", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
            "train": {"steps": 10, "batch_size": 4, "eval_every": 5, "checkpoint_every": 5, "keep_checkpoints": 0},
        },
        "grid": {"model.block": ["pre-ln", "sas-p"]},
        "finetune": stage,
    }


@pytest.mark.slow
def test_a_sweep_fine_tunes_its_runs_and_reports_the_table(tmp_path, corpus_dir, toy_task):
    sweep = build_sweep(_spec(corpus_dir, toy_task))
    assert run_sweep(sweep, tmp_path, progress=False, log=lambda *a: None)["status"] == "completed"
    ft = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("finetune/*/*/finetune.json"))
    assert len(ft) == 2 and ft[0].startswith("finetune/pre-ln/")
    report = build_report(tmp_path)
    section = next(s for s in report.sections if s.id == "downstream")
    lines = section.pre.splitlines()
    assert lines[0].split()[:3] == ["run", "params", "speed"] and "paper score" in lines[0]
    pre_ln = next(line for line in lines if line.startswith("pre-ln"))
    assert "1.00x" in pre_ln and "78.9 ± .7" in pre_ln and " ± " in pre_ln.split("1.00x")[1]
    assert lines[-1].startswith("majority class")
    # The fine-tuning runs are not reported as pre-training runs.
    assert all(not r.name.startswith("finetune") for r in report.runs)
    # Running the sweep again keeps every finished fine-tuning seed.
    logs = []
    run_sweep(sweep, tmp_path, progress=False, log=logs.append)
    assert sum("earlier, kept" in line for line in logs) == 2 * 2 + 2


@pytest.mark.slow
def test_checkpoints_along_pre_training_give_the_score_curve(tmp_path, corpus_dir, toy_task):
    sweep = build_sweep(_spec(corpus_dir, toy_task, steps=[5, 10]))
    run_sweep(sweep, tmp_path, progress=False, log=lambda *a: None)
    assert (tmp_path / "finetune" / "sas-p" / "step-5").is_dir()
    section = next(s for s in build_report(tmp_path).sections if s.id == "downstream")
    (figure,) = section.figures
    assert figure.path.is_file() and "reaches" in figure.caption


@pytest.mark.slow
def test_a_run_that_diverged_in_pre_training_is_skipped_and_marked(tmp_path, corpus_dir, toy_task):
    spec = _spec(corpus_dir, toy_task)
    del spec["grid"]
    spec["runs"] = [
        {"name": "pre-ln", "label": "pre-ln", "model.block": "pre-ln"},
        {"name": "blowup", "label": "blow-up", "model.block": "sas-p", "train.lr": 1e4, "train.grad_clip": 0.0},
    ]
    sweep = build_sweep(spec)
    assert run_sweep(sweep, tmp_path, progress=False, log=lambda *a: None)["status"] == "completed"
    (path,) = tmp_path.glob("finetune/blowup/*/finetune.json")
    skipped = json.loads(path.read_text())
    assert skipped["status"] == "skipped" and "pre-training diverged" in skipped["reason"]
    lines = next(s for s in build_report(tmp_path).sections if s.id == "downstream").pre.splitlines()
    row = next(line for line in lines if line.startswith("blow-up"))
    assert "[pre-training diverged at step" in row and "skipped" in row
