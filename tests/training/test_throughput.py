"""Run throughput: steady-state tokens/s (warm-up and compilation excluded), compile_s, MFU; compile auto."""

import json
import time

import pytest
import torch

from blocklab import build_model
from blocklab.training import Trainer, load_config, train
from blocklab.training.config import TrainConfig
from blocklab.training.tasks import TASKS
from blocklab.training.throughput import WARMUP_STEPS, Throughput, flops_per_token
from tests.helpers import small_cfg


def test_warmup_steps_are_excluded_and_reported_as_compile_time():
    state = {"tokens": 0, "train_seconds": 0.0}
    thr = Throughput(state, compiled=True, flops_per_token=10.0, peak=lambda: 4000.0)
    for dt in [5.0] * WARMUP_STEPS + [1.0] * 6:
        state["tokens"] += 100
        state["train_seconds"] += dt
        thr.step(dt, 100)
    s = thr.summary()
    assert s["tokens_per_s"] == pytest.approx(100.0)  # the whole-run average would be 34
    assert s["compile_s"] == pytest.approx(WARMUP_STEPS * 4.0)
    assert s["mfu"] == pytest.approx(100.0 * 10.0 / 4000.0)
    assert s["steady_steps"] == 6


def test_resumed_totals_carry_over_and_eager_runs_have_no_compile_time():
    state = {"tokens": 0, "train_seconds": 0.0, "steady_tokens": 600, "steady_seconds": 3.0, "warmup_seconds": 1.0}
    thr = Throughput(state, compiled=False, flops_per_token=1.0, peak=lambda: 1.0)
    for dt in [2.0] * WARMUP_STEPS + [1.0] * 2:  # the new process warms up again
        thr.step(dt, 100)
    s = thr.summary()
    assert s["tokens_per_s"] == pytest.approx(800 / 5.0)
    assert s["compile_s"] is None and s["startup_s"] == pytest.approx(WARMUP_STEPS * 1.0)


def test_flops_per_token_counts_every_matmul_and_the_tied_head():
    cfg = small_cfg("pre-ln")
    model = build_model(cfg)
    d, f, L, V, T = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.vocab_size, 16
    per_block = 4 * d * d + 2 * d * f
    assert flops_per_token(model, T) == 6 * (L * per_block + V * d) + 12 * L * T * d


def test_translation_flops_count_decoder_self_and_cross_attention():
    cfg = small_cfg("pre-ln", "translation", n_decoder_layers=2)
    model = build_model(cfg)
    T, d = 16, cfg.d_model
    run = load_config(None, {"model": {"task": "translation", "block": "pre-ln", "n_decoder_layers": 2}})
    layers = TASKS["translation"](run).attention_layers(model)  # the task says how many attention products
    attention = (
        flops_per_token(model, T, layers)
        - 6 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
        - 6 * model.head_weight.numel()
    )
    assert attention == 12 * (cfg.n_layers + 2 * 2) * T * d


@pytest.mark.slow
def test_summary_reports_the_steady_rate_when_the_first_step_is_slow(tmp_path, overrides, monkeypatch):
    original = Trainer.train_step
    calls = []

    def slow_first(self, step):
        calls.append(step)
        if len(calls) == 1:
            time.sleep(2.0)  # stands in for compilation
        return original(self, step)

    monkeypatch.setattr(Trainer, "train_step", slow_first)
    s = train(load_config(None, overrides), tmp_path / "r", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    steady = s.tokens / (s.tokens_per_s or 1)
    assert s.startup_s >= 1.9 and s.compile_s is None
    # The whole-run average includes the 2 s sleep; the steady rate must not.
    assert s.tokens_per_s > s.tokens / s.wall_time_s
    assert steady < s.wall_time_s - 1.5
    assert s.mfu is not None and 0 < s.mfu < 1
    assert all("mfu" in r for r in rows if "loss" in r)


def test_compile_auto_is_off_on_cpu_and_true_false_strings_are_accepted(tmp_path, overrides):
    assert TrainConfig(compile="auto").compile == "auto"
    assert TrainConfig(compile="true").compile is True and TrainConfig(compile="no").compile is False
    with pytest.raises(ValueError, match="train.compile='sometimes'.*auto, true, false"):
        TrainConfig(compile="sometimes")
    overrides["train"]["device"] = "cpu"
    trainer = Trainer(load_config(None, overrides), tmp_path / "r", progress=False)
    assert trainer.compiled is False
    trainer.dist.close()


@pytest.mark.slow
def test_regionally_compiled_training_matches_eager(tmp_path, overrides):
    overrides["train"].update(steps=3, eval_every=3, device="cpu")
    eager = train(load_config(None, overrides), tmp_path / "eager", progress=False)
    overrides["train"]["compile"] = True
    compiled = train(load_config(None, overrides), tmp_path / "compiled", progress=False)
    assert compiled.compile is True and compiled.compile_s is not None
    assert compiled.final_loss == pytest.approx(eager.final_loss, rel=1e-4)
