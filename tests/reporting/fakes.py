"""Fake but realistic run folders (the trainer's file formats), with losses chosen so the expected
table values can be worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

from blocklab.training import load_config
from blocklab.training.config import to_toml

TINY_MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "vocab_size": 512, "max_seq_len": 32}


def gains_for(block: str, step: int) -> dict:
    if not block.startswith("sas"):
        return {}
    out = {}
    for layer in range(2):
        for h in range(2):
            out[f"gain/L{layer}.alpha.h{h}"] = 1.0 - 0.001 * step * (h + 1)
            out[f"gain/L{layer}.beta.h{h}"] = 1.0 + 0.002 * step
            out[f"gain/L{layer}.gamma.h{h}"] = 1.0 + 0.0005 * step * layer
        out[f"gain/L{layer}.beta_ff"] = 0.1 + 0.0003 * step
        if block != "sas":
            out[f"gain/L{layer}.beta_sa"] = 1.0 - 0.0002 * step
    return out


def write_run(
    path: Path,
    block: str,
    slope: float,
    *,
    last_step: int,
    steps: int = 200,
    log_every: int = 10,
    eval_every: int = 50,
    status: str | None = "completed",
    lr: float = 1e-3,
    speed: float = 1000.0,
    n_params: int = 12_345,
    diverged_step: int | None = None,
    partial_line: bool = False,
    extra_eval_steps=(),
    warmup: int = 10,
    seed: int = 0,
    unigram_entropy: float | None = None,
) -> Path:
    """A run whose logged training loss at step s is 6 - slope * s (steps log_every..last_step);
    eval loss 6.1 - slope * s every eval_every steps; summary.json unless status is None."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = load_config(
        None,
        {
            "model": dict(TINY_MODEL, block=block),
            "data": {"seq_len": 32, "vocab_size": 512},
            "train": {
                "steps": steps,
                "lr": lr,
                "log_every": log_every,
                "eval_every": eval_every,
                "warmup_steps": warmup,
                "seed": seed,
            },
        },
    )
    (path / "config.toml").write_text(to_toml(cfg))
    rows, evals = [], []
    eval_steps = sorted(set(range(eval_every, last_step + 1, eval_every)) | set(extra_eval_steps))
    for s in sorted(set(range(log_every, last_step + 1, log_every)) | set(eval_steps)):
        row = {"step": s}
        if s % log_every == 0:
            row.update(loss=6.0 - slope * s, lr=lr, tokens_per_s=speed, tokens=s * 128, elapsed_s=s * 128 / speed)
            row.update(gains_for(block, s))
        if s in eval_steps:
            row["eval_loss"] = 6.1 - slope * s
            evals.append(row["eval_loss"])
        rows.append(row)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if partial_line:
        text += '{"step": ' + str(last_step + log_every) + ', "loss": 3.2, "lr": 0.0'  # killed mid-write
    (path / "metrics.jsonl").write_text(text)
    if status is not None:
        summary = {
            "status": status,
            "step": last_step if status != "diverged" else diverged_step - 1,
            "steps": steps,
            "block": block,
            "task": "clm",
            "n_params": n_params,
            "initial_loss": 6.0,
            "final_loss": 6.0 - slope * last_step,
            "final_eval_loss": evals[-1] if evals else None,
            "best_eval_loss": min(evals) if evals else None,
            "tokens": last_step * 128,
            "tokens_per_s": speed,
            "wall_time_s": last_step * 128 / speed,
            "world_size": 1,
            "device": "cpu",
            "precision": "fp32",
        }
        if diverged_step is not None:
            summary.update(diverged_step=diverged_step, diverged_loss=float("nan"))
        if unigram_entropy is not None:
            summary["unigram_entropy"] = unigram_entropy
        if status == "stalled":
            summary["stalled_step"] = last_step
        (path / "summary.json").write_text(json.dumps(summary, indent=2))
    return path


def make_fake_sweep(root: Path, with_sweep_json: bool = True) -> Path:
    """Four runs: two completed (final losses 3.0 and 3.5), one diverged at step 95 (last logged loss 4.2),
    one without summary.json (still running: last logged step 120, loss 3.12) whose last line is partial."""
    runs = root / "runs"
    write_run(runs / "pre-ln", "pre-ln", 0.015, last_step=200, speed=2000.0, n_params=1_234_567)
    write_run(runs / "sas-p", "sas-p", 0.0125, last_step=200, speed=2500.0, n_params=1_034_567, extra_eval_steps=(25,))
    write_run(runs / "post-ln", "post-ln", 0.02, last_step=90, status="diverged", diverged_step=95, lr=3e-3)
    write_run(runs / "sas", "sas", 0.024, last_step=120, status=None, partial_line=True)
    if with_sweep_json:
        (root / "sweep.json").write_text(
            json.dumps(
                {
                    "name": "fake-sweep",
                    "description": "Four blocks on a made-up loss curve.",
                    "expected_cost": "a few seconds",
                    "base": {},
                    "probes": None,
                    "runs": [
                        {"name": "sas-p", "label": "SAS-P", "overrides": {"model": {"block": "sas-p"}}},
                        {"name": "pre-ln", "label": "Pre-LN", "overrides": {"model": {"block": "pre-ln"}}},
                        {"name": "post-ln", "label": "Post-LN lr=3e-3", "overrides": {"train": {"lr": 3e-3}}},
                        {"name": "sas", "label": "SAS", "overrides": {"model": {"block": "sas"}}},
                    ],
                }
            )
        )
    return root


def make_experiment_sweep(root: Path) -> Path:
    """Two experiments in one sweep, as `quick` holds them, each logged every 10 of 200 steps (no smoothing).
    "he": pre-ln, sas, sas-p at lr 3e-3, final losses 3.0 (the reference), 2.6 and 3.4: SAS reaches 3.0 at
    step 180 (6 - 0.017 s <= 3), SAS-P never. "xiong": post-ln and pre-ln at lr 1e-3, warm-up 60 and 0, final
    4.0, 4.4, 3.6 (the reference, xiong_pre-ln) and 2.9: Pre-LN without warm-up reaches 3.6 at step 160
    (6 - 0.0155 s <= 3.6 from s = 155)."""
    runs = root / "runs"
    he = {"pre-ln": 3.0, "sas": 2.6, "sas-p": 3.4}
    xiong = {("post-ln", 60): 4.0, ("post-ln", 0): 4.4, ("pre-ln", 60): 3.6, ("pre-ln", 0): 2.9}
    entries = []
    for block, final in he.items():
        write_run(runs / block, block, (6.0 - final) / 200, last_step=200, lr=3e-3)
        entries.append({"name": block, "label": block.upper(), "group": block, "experiment": "he", "overrides": {}})
    for (block, warmup), final in xiong.items():
        name = f"xiong_{block}" + ("_wu0" if warmup == 0 else "")
        write_run(runs / name, block, (6.0 - final) / 200, last_step=200, lr=1e-3, warmup=warmup)
        entries.append(
            {
                "name": name,
                "label": f"{block} wu{warmup} (Xiong)",
                "group": name,
                "experiment": "xiong",
                "overrides": {},
            }
        )
    (root / "sweep.json").write_text(
        json.dumps(
            {
                "name": "two-experiments",
                "description": "Two papers in one sweep.",
                "runs": entries,
                "experiments": {
                    "he": {"title": "He & Hofmann", "description": "The simplified blocks.", "target_run": "pre-ln"},
                    "xiong": {"title": "Xiong et al.", "description": "Warm-up.", "target_run": "xiong_pre-ln"},
                },
            }
        )
    )
    return root
