"""Sharded (DCP) checkpoints of train.parallel=fsdp runs, in one process without torchrun: the format,
an exact resume, one-process loading (load_checkpoint, generate) and damaged or mismatched checkpoints."""

import json
import shutil

import pytest
import torch

from blocklab import build_model
from blocklab.cli import main
from blocklab.errors import UserError
from blocklab.training import load_config, rundir, train
from blocklab.training.checkpoint import checkpoint_steps, load_checkpoint, open_checkpoint
from blocklab.training.distributed import Dist
from blocklab.training.optim import make_optimizer
from blocklab.training.parallel import scalars_as_vectors
from blocklab.training.sharded import load_sharded
from tests.helpers import as_args


def losses(run):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def quiet_train(cfg, out, **kw):
    return train(cfg, out, progress=False, log=lambda *a: None, **kw)


def config(corpus_dir, parallel="fsdp", steps=20, **train_kw):
    """A constant learning rate without warm-up: a 10-step run resumed to 20 steps is the 20-step run."""
    return {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},  # scalar gains
        "train": {
            "steps": steps,
            "batch_size": 4,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "keep_checkpoints": 0,
            "lr": 3e-3,
            "schedule": "constant",
            "warmup_steps": 0,
            "parallel": parallel,
            **train_kw,
        },
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus_dir):
    """fsdp: 20 steps; cut: the same run trained 10 steps then resumed to 20; ddp: the 20 steps in the
    whole-checkpoint format."""
    root = tmp_path_factory.mktemp("sharded")
    paths = {name: root / name for name in ("fsdp", "cut", "ddp")}
    assert quiet_train(load_config(None, config(corpus_dir)), paths["fsdp"]).status == "completed"
    assert quiet_train(load_config(None, config(corpus_dir, steps=10)), paths["cut"]).step == 10
    s = quiet_train(load_config(None, config(corpus_dir)), paths["cut"], resume=True)
    assert s.status == "completed" and s.step == 20
    assert quiet_train(load_config(None, config(corpus_dir, parallel="ddp")), paths["ddp"]).status == "completed"
    return paths


def test_fsdp_run_writes_dcp_checkpoints(runs):
    ckpts = runs["fsdp"] / "checkpoints"
    assert checkpoint_steps(ckpts) == [5, 10, 15, 20]
    for step in (5, 20):
        path = ckpts / f"step-{step:08d}"
        meta = json.loads((path / "state.json").read_text())
        assert meta["format"] == "dcp" and meta["step"] == step and meta["world_size"] == 1
        assert (path / "dcp" / ".metadata").is_file() and (path / "dcp" / "__0_0.distcp").is_file()
        assert not (path / "model.safetensors").exists() and not (path / "optimizer.safetensors").exists()
        manifest = json.loads((path / "manifest.json").read_text())
        assert {"dcp/.metadata", "dcp/__0_0.distcp", "state.json", "rng.safetensors"} <= set(manifest)
    assert open_checkpoint(ckpts)["format"] == "dcp" and open_checkpoint(ckpts)["step"] == 20
    # the summary says which format the run keeps, though one process has nothing to shard
    assert json.loads((runs["fsdp"] / "summary.json").read_text())["parallel"] == "fsdp"
    ddp = runs["ddp"] / "checkpoints"
    assert open_checkpoint(ddp)["format"] == "safetensors" and not (ddp / "step-00000020" / "dcp").exists()


def test_resuming_a_dcp_run_is_bit_for_bit(runs):
    full, cut = losses(runs["fsdp"]), losses(runs["cut"])
    assert len(full) == len(cut) == 20
    assert cut == full  # exact: model, Adam's moments and the random state all came back from step 10
    # ... and the same training in the whole-checkpoint format gives the same losses in one process.
    assert losses(runs["ddp"]) == full


@pytest.mark.parametrize("step", [10, 20])
def test_a_dcp_checkpoint_loads_as_one_model_state_in_one_process(runs, corpus_dir, step):
    dcp_ckpt = load_checkpoint(runs["fsdp"] / "checkpoints", step)
    whole = load_checkpoint(runs["ddp"] / "checkpoints", step)
    assert dcp_ckpt["step"] == step and dcp_ckpt["format"] == "dcp" and "optimizer" not in dcp_ckpt
    assert dcp_ckpt["model"].keys() == whole["model"].keys()
    for key, value in whole["model"].items():
        assert torch.equal(dcp_ckpt["model"][key], value), key
    # The model's own state dict takes it, and so does load_sharded (model and optimizer state).
    cfg = load_config(runs["fsdp"] / "config.toml")
    model = build_model(cfg.model)
    assert model.load_state_dict(dcp_ckpt["model"])
    fresh = build_model(cfg.model)
    assert scalars_as_vectors(fresh)  # as an fsdp run holds its model (sas-p has scalar gains)
    opt = make_optimizer(fresh, cfg.train)
    load_sharded(dcp_ckpt["path"], fresh, opt, Dist())
    for key, value in whole["model"].items():
        assert torch.equal(fresh.state_dict()[key].reshape(value.shape), value), key
    got_state, want_state = opt.state_dict()["state"], whole["optimizer"]["state"]
    assert got_state.keys() == want_state.keys() and len(want_state) == len(list(fresh.parameters()))
    for i, want in want_state.items():
        for name in ("step", "exp_avg", "exp_avg_sq"):  # Adam's state, parameter by parameter
            got, want_t = torch.as_tensor(got_state[i][name]), torch.as_tensor(want[name])
            assert torch.equal(got.reshape(want_t.shape), want_t), (i, name)
    # The steps differ: the comparisons above can tell checkpoints apart.
    other = load_checkpoint(runs["ddp"] / "checkpoints", 30 - step)["model"]
    assert any(not torch.equal(other[k], v) for k, v in whole["model"].items())


def test_a_corrupted_shard_is_one_clear_error_and_a_resume_falls_back(runs, corpus_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["fsdp"], run)
    shard = run / "checkpoints" / "step-00000020" / "dcp" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = bytes(16)  # the same size, other bytes
    assert bytes(data) != shard.read_bytes()
    shard.write_bytes(bytes(data))
    for load in (open_checkpoint, load_checkpoint):
        with pytest.raises(UserError, match=r"corrupted: dcp/__0_0\.distcp does not match its checksum"):
            load(run / "checkpoints")
    assert load_checkpoint(run / "checkpoints", 15)["step"] == 15  # the others are untouched
    capsys.readouterr()
    # A resume takes the newest checkpoint that verifies (step 15) and says which one it passed over.
    s = quiet_train(load_config(None, config(corpus_dir, steps=25)), run, resume=True)
    assert s.status == "completed" and s.step == 25
    err = capsys.readouterr().err
    assert "step-00000020" in err and "does not match its checksum" in err
    assert "using the checkpoint of step 15" in err
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 26))  # steps 16..20 were trained again


def test_a_missing_shard_is_one_clear_error(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["fsdp"], run)
    (run / "checkpoints" / "step-00000020" / "dcp" / "__0_0.distcp").unlink()
    with pytest.raises(UserError, match="step-00000020.*unreadable or truncated"):
        load_checkpoint(run / "checkpoints")


def test_resuming_a_dcp_run_as_ddp_is_refused(runs, corpus_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["fsdp"], run)
    with pytest.raises(UserError, match=r"train\.parallel='fsdp', not 'ddp'.*--overwrite"):
        quiet_train(load_config(None, config(corpus_dir, parallel="ddp", steps=25)), run, resume=True)
    over = config(corpus_dir, parallel="ddp", steps=25)
    rc = main(["train", "--out", str(run), "--resume", "--no-progress", *map(str, as_args(over))])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1 and "Traceback" not in err and "train.parallel" in err, err
    assert checkpoint_steps(run / "checkpoints")[-1] == 20 and len(losses(run)) == 20  # nothing trained


def test_the_trainer_refuses_a_checkpoint_of_the_other_format(runs, corpus_dir, tmp_path, monkeypatch):
    """Behind the config check: were train.parallel allowed to change on resume, the trainer would still
    not read one format as the other."""
    monkeypatch.setattr(rundir, "RESUMABLE_CHANGES", rundir.RESUMABLE_CHANGES | {("train", "parallel")})
    run = tmp_path / "run"
    shutil.copytree(runs["fsdp"], run)
    with pytest.raises(UserError, match="is dcp but a train.parallel=ddp run reads safetensors"):
        quiet_train(load_config(None, config(corpus_dir, parallel="ddp", steps=25)), run, resume=True)
    run = tmp_path / "whole"
    shutil.copytree(runs["ddp"], run)
    with pytest.raises(UserError, match="is safetensors but a train.parallel=fsdp run reads dcp"):
        quiet_train(load_config(None, config(corpus_dir, steps=25)), run, resume=True)


def test_a_dcp_checkpoint_that_does_not_fit_the_model_is_one_clear_error(runs, corpus_dir, tmp_path, monkeypatch):
    """DCP's own error (a BaseException) behind the config check, as after a change of the model code."""
    monkeypatch.setattr(rundir, "RESUMABLE_CHANGES", rundir.RESUMABLE_CHANGES | {("model", "d_ff")})
    run = tmp_path / "run"
    shutil.copytree(runs["fsdp"], run)
    over = config(corpus_dir, steps=25)
    over["model"]["d_ff"] = 128
    with pytest.raises(UserError, match="does not fit this model"):
        quiet_train(load_config(None, over), run, resume=True)


def test_generate_reads_a_dcp_run(runs, capsys):
    texts = {}
    for name in ("fsdp", "ddp"):
        capsys.readouterr()
        assert main(["generate", "--run", str(runs[name]), "--prompt", "def parse(", "--max-new-tokens", "20"]) == 0
        texts[name] = capsys.readouterr().out
    assert texts["fsdp"].startswith("def parse(") and len(texts["fsdp"]) > len("def parse(") + 5
    assert texts["fsdp"] == texts["ddp"]  # the same weights, the same seed: the same text
