"""FSDP2 under torchrun on the CPU (gloo, 2 processes), the runs that need none of test_fsdp.py's
shared ones: every block sharded, bf16 mixed precision, a translation run decoded by one process (a
file of its own, so that pytest-xdist's --dist loadfile can run it beside test_fsdp.py).

All of it is one torchrun start (about 10 s of imports on 2 cores), made once for the module: every
block's sharded steps, then the bf16 and the translation runs (test_fsdp.train_together). The
one-process runs (the bf16 reference, translate) run in the test process."""

import json

import pytest

from blocklab.cli import main
from tests.training.test_fsdp import (
    STEPS,
    base_overrides,
    losses,
    ok,
    summary,
    train_args,
    train_here,
    train_together,
)

pytestmark = pytest.mark.slow


def rows(run) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


# Muon's bf16 Newton-Schulz on 2 processes against one: 9e-6 at most over the 20 steps, measured on this config
# (a broken shard or a step on one shard's matrix alone would be off by far more than the bound).
TOL_MUON = 1e-4


@pytest.fixture(scope="module")
def over(corpus_dir):
    return base_overrides(corpus_dir)


EVERY_BLOCK = r"""
import copy, sys, torch
import blocklab.blocks  # registers every block
from blocklab import ModelConfig, build_model
from blocklab.model import gathered
from blocklab.registry import REGISTRY
from blocklab.training import distributed, parallel
from blocklab.training.config import TrainConfig
from blocklab.training.optim import make_optimizer

d = distributed.setup("cpu")
B, T, V = 8, 12, 61
for name in sorted(REGISTRY):
    cfg = ModelConfig(block=name, vocab_size=V, d_model=32, n_layers=3, n_heads=4, d_ff=64, max_seq_len=T)
    torch.manual_seed(0)
    ref = build_model(cfg)
    model = copy.deepcopy(ref)
    parallel.scalars_as_vectors(model)
    parallel.shard(model, "fp32")
    tc = TrainConfig(lr=1e-2, steps=3)
    opts = make_optimizer(ref, tc), make_optimizer(model, tc)
    rows = slice(d.rank * B // 2, (d.rank + 1) * B // 2)
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        ids, labels = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
        for m, opt, part, scale in ((ref, opts[0], slice(None), 1), (model, opts[1], rows, 2)):
            (m(ids[part], labels=labels[part], loss_reduction="sum", return_logits=False).loss / (B * T) * scale).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)  # clipping over shards: the global norm
            opt.step()
            m.after_optimizer_step()  # nGPT re-normalises sharded matrices
            opt.zero_grad()
    worst = max((gathered(p.detach()).reshape(q.shape) - q.detach()).abs().max().item()
                for p, q in zip(model.parameters(), ref.parameters()))
    if d.main:
        print(f"worst {name} {worst:.3g}", flush=True)

# The process group stays open: the first run (its setup finds it) trains in it and closes it."""


def translation_overrides(root) -> dict:
    from tests.training.test_translation_train import write_pairs

    return {
        "model": {"task": "translation", "block": "pre-ln", "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64},
        "data": {
            "source": str(write_pairs(root / "pairs.tsv")),
            "vocab_size": 300,
            "seq_len": 24,
            "val_fraction": 0.1,
        },
        "train": {
            "steps": 6,
            "batch_size": 8,
            "log_every": 1,
            "eval_every": 3,
            "eval_batches": 1,
            "checkpoint_every": 3,
            "lr": 3e-3,
            "device": "cpu",
            "parallel": "fsdp",
        },
    }


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, over):
    """The torchrun start: every block's sharded steps (on stdout), the bf16 FSDP run (bf16-2), the
    translation run (translation), the Muon runs (muon-2, and muon-half: its first half, then resumed from
    its sharded checkpoint) and a QK-clip run (clip-2); bf16-1, muon-1 and clip-1, the one-process
    references, train in this process."""
    root = tmp_path_factory.mktemp("fsdp-blocks")
    bf16, fsdp, muon = ["--train.precision", "bf16"], ["--train.parallel", "fsdp"], ["--train.optimizer", "muon"]
    train_here(root / "bf16-1", over, bf16)
    train_here(root / "muon-1", over, muon)
    clip = ["--model.block", "pre-ln", "--train.qk_clip", "0.02"]  # pre-ln's logits pass 0.02 from the start
    train_here(root / "clip-1", over, clip)
    half = muon + fsdp + ["--train.steps", str(STEPS // 2)]
    p, _ = train_together(
        [
            train_args(root / "bf16-2", over, bf16 + fsdp),
            train_args(root / "translation", translation_overrides(root)),
            train_args(root / "muon-2", over, muon + fsdp),
            train_args(root / "muon-half", over, half),  # then resumed to STEPS: a constant rate, steps may grow
            train_args(root / "muon-half", over, muon + fsdp, resume=True),
            train_args(root / "clip-2", over, clip + fsdp),
        ],
        prelude=EVERY_BLOCK,
    )
    ok(p)
    return root, p


def test_bf16_mixed_precision_policy_trains_like_one_process_bf16(sharded):
    root, _ = sharded
    s = summary(root / "bf16-2")
    assert (s["world_size"], s["parallel"], s["precision"], s["status"]) == (2, "fsdp", "bf16", "completed")
    one, two = losses(root / "bf16-1"), losses(root / "bf16-2")
    # FSDP gathers bf16 copies of the blocks' weights, gains and norm weights included, which autocast
    # leaves fp32: close, not equal (6e-4 at most, measured on this config)
    assert two == pytest.approx(one, abs=5e-3) and two[-1] < two[0] - 0.3


def test_muon_steps_dtensor_shards_like_one_process_and_resumes_from_its_sharded_state(sharded):
    """torch.optim.Muon on FSDP's DTensor shards: its Newton-Schulz iteration runs on the sharded momentum
    (DTensor's ops gather what each product needs) in bf16, whose roundings fall otherwise when the sums come
    in another order than one process's: close, not equal. The sharded checkpoint holds Muon's momentum and
    AdamW's moments: the resumed run continues the uninterrupted one bit for bit (the same processes)."""
    root, _ = sharded
    s = summary(root / "muon-2")
    assert (s["world_size"], s["parallel"], s["status"]) == (2, "fsdp", "completed")
    one, two = losses(root / "muon-1"), losses(root / "muon-2")
    assert len(one) == STEPS and one[-1] < one[0] - 0.3  # it learns
    assert two == pytest.approx(one, abs=TOL_MUON)
    assert losses(root / "muon-half") == two


def test_qk_clip_reduces_the_maxima_over_processes_and_scales_the_shards(sharded):
    """Every process sees its own rows of the batch: the heads' maxima are reduced (MAX) before the clip, so
    that each shard of W^Q and W^K scales by the factor one process would take; a run clipping every step
    trains as one process does, and logs the same maxima."""
    root, _ = sharded
    one, two = rows(root / "clip-1"), rows(root / "clip-2")
    assert summary(root / "clip-2")["world_size"] == 2
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-5)
    for key in ("max_logit/L0", "max_logit/L1"):
        assert [r[key] for r in two] == pytest.approx([r[key] for r in one], rel=1e-4)
        assert one[0][key] > 0.02  # past tau at the first step: the clip acts


def test_translation_under_fsdp_then_translate_in_one_process(sharded, tmp_path, capsys):
    root, _ = sharded
    s = summary(root / "translation")
    assert s["world_size"] == 2 and s["final_bleu"] is not None  # BLEU decoded through the sharded root
    (tmp_path / "in.txt").write_text("Haus Baum\nKatze\n")
    capsys.readouterr()
    # in this process, which has no process group
    assert main(["translate", "--run", str(root / "translation"), "--input", str(tmp_path / "in.txt")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_every_block_shards_and_trains_like_one_process(sharded):
    """Each block's sharded weights after 3 clipped AdamW steps on 2 processes equal those of one
    process on the whole batch: FSDP2 units, scalar gains, clipping over shards and nGPT's
    re-normalisation of sharded matrices (one torchrun for all the blocks)."""
    from blocklab.registry import REGISTRY

    _, p = sharded
    print(p.stdout)
    worst = dict(line.split()[1:] for line in p.stdout.splitlines() if line.startswith("worst "))
    assert set(worst) == set(REGISTRY)
    # A broken shard would be off by about a step (lr = 1e-2); float noise, which Adam's m / sqrt(v)
    # amplifies for near-zero gradients, stays near 1e-5 (peri-ln's largest).
    assert {k: float(v) for k, v in worst.items() if float(v) > 1e-4} == {}
