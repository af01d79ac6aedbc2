"""blocklab finetune: an mlm run's encoder, a fresh head, the recipe, seeds, failures and bad input."""

import json
from pathlib import Path

import pytest
import torch

from blocklab import build_model
from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.training import train
from blocklab.training.checkpoint import load_checkpoint
from blocklab.training.config import load_config
from blocklab.training.finetune import finetune, finetune_config
from blocklab.training.pretrained import load_encoder


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory, corpus_dir) -> Path:
    out = tmp_path_factory.mktemp("mlm") / "run"
    over = {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"task": "mlm", "block": "pre-ln", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {
            "steps": 20,
            "batch_size": 8,
            "lr": 3e-3,
            "eval_every": 20,
            "checkpoint_every": 10,
            "keep_checkpoints": 0,
        },
    }
    assert train(load_config(None, over), out, progress=False, log=lambda *a: None).status == "completed"
    return out


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def separable(tmp_path_factory) -> Path:
    """Label 1 iff the sentence says `True`: a tiny model can learn it, a majority guess gets 50%."""
    words = ["value", "items", "self", "name", "data", "key", "result", "path"]
    rows = [
        {"sentence": f"{words[i % 8]} {words[(i * 3) % 8]} = {'True' if i % 2 else 'None'}", "label": i % 2}
        for i in range(240)
    ]
    return _write_jsonl(tmp_path_factory.mktemp("glue") / "toy.jsonl", rows)


def test_finetuning_beats_the_majority_baseline_on_a_separable_task(mlm_run, separable, tmp_path):
    result = finetune(
        mlm_run,
        str(separable),
        tmp_path / "ft",
        seeds=[0, 1],
        epochs=6,
        overrides={"train": {"lr": 2e-3}},
        progress=False,
        log=lambda *a: None,
    )
    assert result["statuses"] == ["completed", "completed"] and result["failed"] == 0
    assert result["majority_baseline"] <= 60 and result["mean"] >= result["majority_baseline"] + 25
    saved = json.loads((tmp_path / "ft" / "finetune.json").read_text())
    assert saved["scores"] == result["scores"] and saved["sd"] is not None
    summary = json.loads((tmp_path / "ft" / "seed-1" / "summary.json").read_text())
    assert summary["task"] == "classification" and summary["init_from"] == str(mlm_run.resolve())
    assert summary["metric"] == "accuracy" and summary["final_score"] == result["scores"][1]


def test_the_encoder_is_the_checkpoint_of_the_step_asked_for(mlm_run):
    cfg = finetune_config(mlm_run, "variable-misuse", 0, n_labels=2)
    model = build_model(cfg.model)
    assert load_encoder(model, mlm_run, 10) == 10
    ckpt = load_checkpoint(mlm_run / "checkpoints", 10)["model"]
    latest = load_checkpoint(mlm_run / "checkpoints")["model"]
    for name, value in model.state_dict().items():
        if name in ckpt:
            torch.testing.assert_close(value, ckpt[name])
    assert any(not torch.equal(ckpt[k], latest[k]) for k in ckpt)  # the two steps differ
    with pytest.raises(UserError, match="no checkpoint of step 15; it has: 10, 20"):
        load_encoder(model, mlm_run, 15)


def test_a_fine_tuning_run_that_blows_up_is_reported_diverged(mlm_run, separable, tmp_path):
    result = finetune(
        mlm_run,
        str(separable),
        tmp_path / "ft",
        seeds=[0],
        epochs=3,
        overrides={"train": {"lr": 50.0, "grad_clip": 0.0}},
        progress=False,
        log=lambda *a: None,
    )
    assert result["statuses"] == ["diverged"] and result["failed"] == 1 and result["mean"] is None


def _cli(capsys, *args) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def test_bad_input_is_one_clear_line(mlm_run, tmp_path, capsys, corpus_dir):
    clm = tmp_path / "clm"
    over = {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 16},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32},
        "train": {"steps": 2, "batch_size": 2},
    }
    train(load_config(None, over), clm, progress=False, log=lambda *a: None)
    unlabelled = _write_jsonl(tmp_path / "unlabelled.jsonl", [{"sentence": "x"}] * 20)
    folder = tmp_path / "glue"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl", [{"sentence": f"s{i}", "label": ["good", "bad"][i % 2]} for i in range(20)])
    _write_jsonl(folder / "dev.jsonl", [{"sentence": "s", "label": "ugly"}])
    cases = [
        (["--run", str(mlm_run), "--task", "no-such-task"], "unknown task 'no-such-task'"),
        (["--run", str(clm), "--task", "wrong-operator"], "is a clm run; fine-tuning needs"),
        (["--run", str(tmp_path / "nothing"), "--task", "wrong-operator"], "holds no blocklab run"),
        (["--run", str(mlm_run), "--task", str(unlabelled)], "dataset without labels"),
        (["--run", str(mlm_run), "--task", str(folder)], "unknown label 'ugly'"),
        (["--run", str(mlm_run), "--task", "wrong-operator", "--seeds", "a"], "--seeds"),
        (["--run", str(mlm_run), "--task", "wrong-operator", "--step", "7"], "no checkpoint of step 7"),
    ]
    for args, message in cases:
        code, err = _cli(capsys, "finetune", *args, "--out", str(tmp_path / "out"), "--data.task_pool_mb", "0.2")
        assert code == 2 and message in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err


def test_finetune_help_lists_the_tasks(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    out = capsys.readouterr().out
    assert all(
        t in out
        for t in ("exception-type", "variable-misuse", "wrong-operator", "swapped-operand", "docstring-mismatch", "hf:")
    )


def test_evaluation_runs_at_the_run_precision(mlm_run, separable, tmp_path, monkeypatch):
    """A compiled block recompiles when autocast switches off for evaluation (seen on an H100): the
    task's evaluation runs inside the run's autocast, as training does."""
    from blocklab.training.tasks.classification import Classification

    seen = []
    original = Classification.evaluate

    def spy(self, *args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Classification, "evaluate", spy)
    finetune(
        mlm_run,
        str(separable),
        tmp_path / "ft",
        seeds=[0],
        epochs=1,
        overrides={"train": {"precision": "bf16", "device": "cpu"}},
        progress=False,
        log=lambda *a: None,
    )
    assert seen and all(seen)


def test_compiled_runs_pad_every_batch_to_one_length(mlm_run, separable):
    from blocklab.training.tasks.classification import Classification

    for compile_, lengths in ((True, {32}), (False, None)):
        cfg = finetune_config(
            mlm_run, str(separable), 0, {"train": {"compile": compile_, "device": "cpu"}}, n_train=240
        )
        task = Classification(cfg)
        batches = task.batches(task.prepare(lambda *a: None), lambda *a: None)
        got = {batches.train.get(s)[0].shape[1] for s in range(6)} | {b[0].shape[1] for b in batches.val.val_batches()}
        assert got == lengths if lengths else max(got) < 32


def test_regression_fine_tuning_scores_correlations(mlm_run, tmp_path):
    rows = [{"sentence1": f"x = {i % 5}", "sentence2": "y", "label": float(i % 5)} for i in range(120)]
    data = _write_jsonl(tmp_path / "sts.jsonl", rows)
    result = finetune(mlm_run, str(data), tmp_path / "ft", seeds=[0], epochs=2, progress=False, log=lambda *a: None)
    summary = json.loads((tmp_path / "ft" / "seed-0" / "summary.json").read_text())
    assert result["metric"] == "pearson_spearman" and summary["n_labels"] == 1
    assert summary["status"] == "completed" and result["scores"][0] is not None and result["sd"] is None


def test_the_latest_checkpoint_is_named_and_other_settings_are_refused(mlm_run, separable, tmp_path):
    quiet = dict(progress=False, log=lambda *a: None)
    result = finetune(mlm_run, str(separable), tmp_path / "ft", seeds=[0], epochs=1, **quiet)
    assert result["init_step"] == 20  # --step omitted: the latest, written down
    assert (
        finetune(mlm_run, str(separable), tmp_path / "ft", seeds=[0], epochs=1, **quiet)["scores"] == result["scores"]
    )
    with pytest.raises(UserError, match=r"holds a fine-tuning with other settings \(train.lr"):
        finetune(
            mlm_run, str(separable), tmp_path / "ft", seeds=[0], epochs=1, overrides={"train": {"lr": 3e-4}}, **quiet
        )


def test_scores_are_taken_with_dropout_off(mlm_run, separable, tmp_path, monkeypatch):
    from blocklab.model.classifier import Classifier

    modes = []
    forward = Classifier.forward

    def spy(self, input_ids, attention_mask=None, labels=None, **kw):
        if labels is None:  # evaluation's forward passes; training passes labels
            modes.append(self.training)
        return forward(self, input_ids, attention_mask, labels, **kw)

    monkeypatch.setattr(Classifier, "forward", spy)
    finetune(
        mlm_run,
        str(separable),
        tmp_path / "ft",
        seeds=[0],
        epochs=1,
        overrides={"model": {"dropout": 0.1}},
        progress=False,
        log=lambda *a: None,
    )
    assert modes and not any(modes)


def test_the_seeds_of_one_finetune_encode_the_data_once(mlm_run, separable, tmp_path, monkeypatch):
    from blocklab.training.tasks import classification

    calls = []
    build = classification._build_data
    monkeypatch.setattr(classification, "_build_data", lambda cfg, log: calls.append(1) or build(cfg, log))
    classification._LOADED.clear()
    finetune(mlm_run, str(separable), tmp_path / "ft", seeds=[0, 1, 2], epochs=1, progress=False, log=lambda *a: None)
    assert len(calls) == 1  # counted once, then the three seeds' trainers reuse it


def test_finetune_starts_from_a_sharded_checkpoint(tmp_path, corpus_dir, separable):
    """An fsdp-format mlm run (a DCP checkpoint: scalar gains stored as 1-element vectors) gives its
    encoder to a classifier in one process, shapes restored, the same tensors as the checkpoint."""
    out = tmp_path / "mlm"
    over = {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"task": "mlm", "block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {"steps": 6, "batch_size": 8, "lr": 3e-3, "eval_every": 6, "checkpoint_every": 6, "parallel": "fsdp"},
    }
    assert train(load_config(None, over), out, progress=False, log=lambda *a: None).status == "completed"
    assert json.loads((out / "checkpoints" / "step-00000006" / "state.json").read_text())["format"] == "dcp"
    cfg = finetune_config(out, str(separable), 0, n_labels=2)
    model = build_model(cfg.model)
    assert load_encoder(model, out) == 6
    saved, own = load_checkpoint(out / "checkpoints")["model"], model.state_dict()
    assert saved["blocks.0.beta_sa"].shape == own["blocks.0.beta_sa"].shape == ()
    assert all(torch.equal(own[k], v) for k, v in saved.items() if k in own)
    result = finetune(out, str(separable), tmp_path / "ft", seeds=[0], epochs=1, progress=False, log=lambda *a: None)
    assert result["statuses"] == ["completed"]
