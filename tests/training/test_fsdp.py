"""FSDP2 under torchrun on the CPU (gloo, 2 processes): the same losses as one process, sharded
checkpoints resumed on 2 and on 1 process (and a one-process checkpoint on 2), a kill -9 during a
sharded save, a damaged shard, the MFU of the whole job (test_fsdp_blocks.py has the rest).

The runs are made once per module (each torchrun start costs seconds) and compared by the tests.
Losses of different process counts agree to float tolerance, not bit for bit: the gradient is
reduced across processes in another order than one process sums it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.training.checkpoint import load_checkpoint, open_checkpoint
from tests.helpers import as_args

pytestmark = pytest.mark.slow
STEPS = 20


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def train(out: Path, over: dict, nproc: int = 1, extra=(), script: str | None = None, resume: bool = False):
    """`blocklab train` in one process, or under torchrun with `nproc` processes (a driver script
    instead of the package's entry point when given)."""
    args = ["train", "--out", str(out), *map(str, as_args(over)), *map(str, extra)] + (["--resume"] if resume else [])
    entry = ["-c", script] if script else ["-m", "blocklab"]
    if nproc > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        cmd = launch + (["--no-python", sys.executable, "-c", script] if script else ["-m", "blocklab"]) + args
    else:
        cmd = [sys.executable, *entry, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=600)


def ok(p):
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def over(corpus_dir):
    return base_overrides(corpus_dir)


def base_overrides(corpus_dir) -> dict:
    # A constant rate: a run of 10 steps resumed to 20 follows the schedule of a 20-step run.
    return {
        "data": {"source": str(corpus_dir), "vocab_size": 512, "seq_len": 32},
        "model": {"block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},  # scalar gains
        "train": {
            "steps": STEPS,
            "batch_size": 8,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "lr": 3e-3,
            "schedule": "constant",
            "warmup_steps": 0,
            "device": "cpu",
        },
    }


# The reference FSDP run also checks the MFU: one device's peak fixed (the measured one varies with
# load), which changes no loss.
FIXED_PEAK = r"""
import sys
import blocklab.training.trainer as tr
tr.peak_for = lambda device, precision: 1e9  # one device's peak, fixed: the measured one varies with load
from blocklab.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, over):
    root = tmp_path_factory.mktemp("fsdp")
    fsdp = ["--train.parallel", "fsdp"]
    ok(train(root / "one", over))
    ok(train(root / "fsdp", over, 2, fsdp, script=FIXED_PEAK))
    ok(train(root / "accum", over, 2, fsdp + ["--train.grad_accum", "2", "--train.activation_checkpointing", "true"]))
    ok(train(root / "ddp-accum", over, 2, ["--train.grad_accum", "2"]))
    # 10 of the 20 steps on 2 processes, then on to 20 on 2 and (a copy) on 1
    ok(train(root / "half", over, 2, fsdp + ["--train.steps", "10"]))
    shutil.copytree(root / "half", root / "half-on-1")
    ok(train(root / "half", over, 2, fsdp, resume=True))
    ok(train(root / "half-on-1", over, 1, fsdp, resume=True))
    # 10 steps in one process (sharded format), then on to 20 on 2
    ok(train(root / "one-then-2", over, 1, fsdp + ["--train.steps", "10"]))
    ok(train(root / "one-then-2", over, 2, fsdp, resume=True))
    return root


def test_fsdp_equals_one_process(runs):
    one = losses(runs / "one")
    assert len(one) == STEPS and one[-1] < one[0] - 0.3  # it learns
    assert losses(runs / "fsdp") == pytest.approx(one, rel=1e-5)
    s = summary(runs / "fsdp")
    assert (s["world_size"], s["parallel"], s["status"]) == (2, "fsdp", "completed")
    assert s["n_params"] == summary(runs / "one")["n_params"]  # counted over the shards, not one shard


def test_fsdp_with_grad_accum_and_activation_checkpointing_equals_one_process(runs):
    assert losses(runs / "accum") == pytest.approx(losses(runs / "one"), rel=1e-5)
    assert summary(runs / "accum")["grad_accum"] == 2


def test_ddp_with_grad_accum_equals_one_process(runs):
    assert losses(runs / "ddp-accum") == pytest.approx(losses(runs / "one"), rel=1e-5)
    assert summary(runs / "ddp-accum")["parallel"] == "ddp"


def test_sharded_checkpoints_are_dcp_folders(runs):
    ckpt = open_checkpoint(runs / "fsdp" / "checkpoints")
    assert ckpt["format"] == "dcp" and ckpt["step"] == STEPS and ckpt["meta"]["world_size"] == 2
    shards = sorted(p.name for p in (ckpt["path"] / "dcp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # written by both processes
    # one process reads the whole model back: the same tensors whichever number of processes wrote them
    a = load_checkpoint(runs / "fsdp" / "checkpoints")["model"]
    b = load_checkpoint(runs / "one" / "checkpoints")["model"]
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape and a[k].allclose(b[k], rtol=1e-4, atol=1e-5), k


def test_sharded_checkpoint_resumes_on_2_and_on_1_process(runs):
    full = losses(runs / "fsdp")
    on2, on1 = losses(runs / "half"), losses(runs / "half-on-1")
    assert on2 == full  # the same processes: bit for bit
    assert on1[:10] == full[:10] and on1[10:] == pytest.approx(full[10:], rel=1e-5)
    assert summary(runs / "half-on-1")["world_size"] == 1


def test_one_process_checkpoint_resumes_on_2(runs):
    assert losses(runs / "one-then-2") == pytest.approx(losses(runs / "one"), rel=1e-5)
    assert open_checkpoint(runs / "one-then-2" / "checkpoints")["meta"]["world_size"] == 2


KILL_DURING_SHARDED_SAVE = r"""
import os, signal, sys
import blocklab.training.sharded as sh
real = sh.finish
def dying(root, tmp, step, keep, known=None):
    if step == 15:  # every shard of step 15 is written: tear one, then die like kill -9 before finishing
        shard = tmp / "dcp" / "__1_0.distcp"
        shard.write_bytes(shard.read_bytes()[:100])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(root, tmp, step, keep, known)
sh.finish = dying
from blocklab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_during_sharded_save_keeps_the_previous_checkpoint(runs, over, tmp_path):
    out = tmp_path / "cut"
    p = train(out, over, 2, ["--train.parallel", "fsdp"], script=KILL_DURING_SHARDED_SAVE)
    assert p.returncode != 0
    ckdir = out / "checkpoints"
    assert (ckdir / "latest").read_text() == "step-00000010" and list(ckdir.glob(".tmp-step-00000015-*"))
    assert open_checkpoint(ckdir)["step"] == 10  # complete and verified
    ok(train(out, over, 2, ["--train.parallel", "fsdp"], resume=True))
    assert not list(ckdir.glob(".tmp-*"))
    assert losses(out) == losses(runs / "fsdp")


def test_a_damaged_shard_sends_every_process_back_and_none_left_stops_them_all(runs, over, tmp_path):
    """The processes verify the files between them: a damaged latest checkpoint sends all of them back to the
    same older one and the resume goes on; with none left that verifies, all of them stop with one line (none
    waits in a collective: the timeout would say so)."""
    run = tmp_path / "run"
    shutil.copytree(runs / "fsdp", run)
    shard = run / "checkpoints" / f"step-{STEPS:08d}" / "dcp" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[::-1])
    p = train(run, over, 2, ["--train.parallel", "fsdp", "--train.steps", STEPS + 5], resume=True)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "does not match its checksum" in p.stderr and f"using the checkpoint of step {STEPS - 5}" in p.stderr
    assert summary(run)["step"] == STEPS + 5
    for ckpt in (run / "checkpoints").glob("step-*"):
        f = ckpt / "dcp" / "__1_0.distcp"
        f.write_bytes(f.read_bytes()[::-1])
    p = train(run, over, 2, ["--train.parallel", "fsdp", "--train.steps", STEPS + 10], resume=True)
    assert p.returncode != 0
    assert "does not match its checksum" in p.stderr
    assert "[rank0]: Traceback" not in p.stderr and "[rank1]: Traceback" not in p.stderr


def test_mfu_is_the_whole_jobs(runs):
    """The global batch's tokens/s over the peak of both processes' devices."""
    s = summary(runs / "fsdp")
    assert s["peak_flops_per_s"] == 2e9
    assert s["mfu"] == pytest.approx(s["tokens_per_s"] * s["flops_per_token"] / 2e9, rel=1e-9)
