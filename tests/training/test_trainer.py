"""Integration tests of the training loop on a tiny model and a real (small) code corpus."""

import json

import pytest
import torch

from blocklab.errors import UserError
from blocklab.training import Trainer, load_config, train
from blocklab.training.checkpoint import load_checkpoint


def losses(run):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_run_directory_holds_everything(tmp_path, overrides):
    s = train(load_config(None, overrides), tmp_path / "r", progress=False)
    run = tmp_path / "r"
    assert s.status == "completed" and s.step == 20 and s.n_params > 0 and s.tokens_per_s > 0
    assert s.attn_impl == "sdpa"  # attn_impl "auto", resolved for the CPU
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))  # log_every 1: every step's loss
    assert {"step", "loss", "lr", "tokens_per_s"} <= set(rows[0])
    assert "eval_loss" in rows[9] and "eval_loss" in rows[19] and "eval_loss" not in rows[0]
    assert any(k.startswith("gain/L0.beta_ff") for k in rows[0])
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert load_checkpoint(run / "checkpoints")["step"] == 20
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert (run / "tokenizer.json").is_file() and (run / "config.toml").is_file()
    assert losses(run)[-1] < losses(run)[0]


def test_deterministic_for_a_seed(tmp_path, overrides):
    overrides["train"]["steps"] = 8
    a = train(load_config(None, overrides), tmp_path / "a", progress=False)
    b = train(load_config(None, overrides), tmp_path / "b", progress=False)
    assert losses(tmp_path / "a") == losses(tmp_path / "b") and a.final_eval_loss == b.final_eval_loss
    overrides["train"]["seed"] = 1
    train(load_config(None, overrides), tmp_path / "c", progress=False)
    assert losses(tmp_path / "c") != losses(tmp_path / "a")


@pytest.mark.parametrize(
    "block,train_kw",
    [("sas-p", {}), ("sas-p", {"optimizer": "muon"}), ("pre-ln", {"optimizer": "muon", "qk_clip": 0.02})],
    ids=["adamw", "muon", "muon-qk-clip"],  # pre-ln: its logits pass 0.02 from the start, so every step clips
)
def test_resume_is_bit_for_bit(tmp_path, overrides, monkeypatch, block, train_kw):
    overrides["model"]["block"] = block
    # 12 steps: the crash at step 8 resumes from the checkpoint at 5, and the resumed steps cross a checkpoint
    # and the evaluation (both at 10), all that a longer run's resume would pass through.
    overrides["train"].update(train_kw, steps=12)
    cfg = load_config(None, overrides)
    train(cfg, tmp_path / "full", progress=False)
    real_step = Trainer.train_step

    def crash_at_8(self, step):
        if step == 7:
            raise RuntimeError("simulated crash")
        return real_step(self, step)

    monkeypatch.setattr(Trainer, "train_step", crash_at_8)
    with pytest.raises(RuntimeError):
        train(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert load_checkpoint(tmp_path / "cut" / "checkpoints")["step"] == 5
    s = train(cfg, tmp_path / "cut", resume=True, progress=False)
    assert s.status == "completed"
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")  # exact equality, steps 1..12


def test_resuming_with_another_thread_count_warns(tmp_path, overrides):
    """What a bit-exact resume needs (the checkpoint's `numerics`) is checked, and a change is said."""
    overrides["train"].update(steps=10, checkpoint_every=5, warmup_steps=0, schedule="constant")  # extends
    train(load_config(None, overrides), tmp_path / "r", progress=False, log=lambda *a: None)
    said, threads = [], torch.get_num_threads()
    overrides["train"]["steps"] = 12
    train(load_config(None, overrides), tmp_path / "r", resume=True, progress=False, log=said.append)
    assert not any("warning: resuming with" in line for line in said)  # the same numerics: nothing to say
    overrides["train"].update(steps=14, threads=threads + 1)  # train.threads: the run sets its own count
    try:
        train(load_config(None, overrides), tmp_path / "r", resume=True, progress=False, log=said.append)
    finally:
        torch.set_num_threads(threads)
    assert any(f"threads {threads} -> {threads + 1}" in line for line in said), said


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_bf16_autocast_and_tasks_train(tmp_path, overrides, task):
    overrides["model"]["task"] = task
    overrides["train"].update(precision="bf16", steps=30, batch_size=8)
    s = train(load_config(None, overrides), tmp_path / "r", progress=False)
    first, last = losses(tmp_path / "r")[:5], losses(tmp_path / "r")[-5:]
    assert s.status == "completed" and sum(last) < sum(first) - 0.5


def test_fp16_refused_on_cpu(tmp_path, overrides):
    # Pinned to the CPU: with device auto a GPU machine would (rightly) accept fp16.
    overrides["train"].update(precision="fp16", device="cpu")
    with pytest.raises(UserError, match="fp16.*CPU"):
        train(load_config(None, overrides), tmp_path / "r", progress=False)


def test_post_ln_without_warmup_at_large_lr_diverges_and_keeps_last_good_checkpoint(tmp_path, overrides):
    """Xiong et al.'s failure case, pushed to blow-up: Post-LN, Adam, no warm-up, lr 1."""
    overrides["model"].update(block="post-ln", norm="layernorm", init="xavier", n_layers=4, d_model=64)
    overrides["train"].update(
        optimizer="adam",
        lr=1.0,
        warmup_steps=0,
        schedule="constant",
        grad_clip=0,
        weight_decay=0,
        checkpoint_every=1,
        steps=30,
    )
    said = []
    s = train(load_config(None, overrides), tmp_path / "r", progress=False, log=said.append)
    assert s.status == "diverged" and s.diverged_step == s.step + 1
    ckpt = load_checkpoint(tmp_path / "r" / "checkpoints")
    assert ckpt["step"] == s.step and all(torch.isfinite(t).all() for t in ckpt["model"].values())
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "diverged"
    assert f"the last good checkpoint (step {s.step}) is kept" in said[-1]
    # Without a checkpoint before the divergence, the log claims none.
    overrides["train"].update(checkpoint_every=1000)
    said = []
    s = train(load_config(None, overrides), tmp_path / "none", progress=False, log=said.append)
    assert s.status == "diverged" and not list((tmp_path / "none").glob("checkpoints/step-*"))
    assert "no checkpoint was written" in said[-1] and "kept" not in said[-1], said[-1]
    # the same model with a sane learning rate trains to the end
    overrides["train"].update(lr=1e-3)
    assert train(load_config(None, overrides), tmp_path / "ok", progress=False).status == "completed"


def test_muon_run_past_its_rate_diverges_as_adamw_does_and_keeps_the_last_good_checkpoint(tmp_path, overrides):
    overrides["train"].update(
        optimizer="muon", lr=1.0, warmup_steps=0, schedule="constant", grad_clip=0, checkpoint_every=1, steps=10
    )
    said = []
    s = train(load_config(None, overrides), tmp_path / "r", progress=False, log=said.append)
    assert s.status == "diverged" and s.diverged_step == s.step + 1
    assert load_checkpoint(tmp_path / "r" / "checkpoints")["step"] == s.step
    assert f"the last good checkpoint (step {s.step}) is kept" in said[-1]
    overrides["train"].update(lr=3e-3, steps=20)  # the same run at a sane rate learns
    s = train(load_config(None, overrides), tmp_path / "ok", progress=False, log=said.append)
    assert s.status == "completed" and losses(tmp_path / "ok")[-1] < losses(tmp_path / "ok")[0] - 0.2


def test_run_directory_rules(tmp_path, overrides):
    cfg = load_config(None, overrides | {"train": overrides["train"] | {"steps": 5}})
    train(cfg, tmp_path / "r", progress=False)
    with pytest.raises(UserError, match="already holds a run"):
        train(cfg, tmp_path / "r", progress=False)
    other = load_config(None, overrides | {"model": overrides["model"] | {"block": "pre-ln"}})
    with pytest.raises(UserError, match="model.block"):
        train(other, tmp_path / "r", resume=True, progress=False)
    assert train(other, tmp_path / "r", overwrite=True, progress=False).status == "completed"
    with pytest.raises(UserError, match="nothing to resume"):
        train(cfg, tmp_path / "empty", resume=True, progress=False)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        train(cfg, tmp_path / "junk", progress=False)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_checkpoint_is_a_clear_error(tmp_path, overrides, damage):
    overrides["train"]["steps"] = 5
    cfg = load_config(None, overrides)
    train(cfg, tmp_path / "r", progress=False)
    ckpt = tmp_path / "r" / "checkpoints" / (tmp_path / "r" / "checkpoints" / "latest").read_text()
    f = ckpt / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-10] + bytes(10))
    with pytest.raises(UserError, match="corrupted|truncated"):
        train(cfg, tmp_path / "r", resume=True, progress=False)
