"""FSDP2 under torchrun on the CPU (gloo, 2 processes): the same losses as one process, sharded
checkpoints resumed on 2 and on 1 process (and a one-process checkpoint on 2), a kill -9 during a
sharded save, a damaged shard, the MFU of the whole job (test_fsdp_blocks.py has the rest).

The runs are made once per module and read by several tests each. A torchrun start costs about 10 s of
imports on 2 cores, a run here a few seconds: the runs that need no start of their own (no kill, no
failure) train one after another in one start (train_together). They form one chain of checkpoints:

- fsdp: killed -9 in the save of its last step (its 20 losses are logged by then; `killed` is a copy as
  it died), then resumed on 2 processes from its checkpoint of step 10: the uninterrupted run's losses,
  bit for bit, and the run whose summary and last checkpoint the tests read.
- half-on-1: a copy of `killed` resumed in one process, checkpointing every 5 steps from there on.
- one-then-2: a copy of half-on-1 whose latest checkpoint is damaged, resumed on 2 processes: back to
  the checkpoint of step 15, which one process wrote.

The one-process runs train in the test process (`blocklab train` as test_sharded.py runs it). Losses of
different process counts agree to float tolerance, not bit for bit: the gradient is reduced across
processes in another order than one process sums it.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

import blocklab.training.trainer as trainer
from blocklab.cli import main
from blocklab.training.checkpoint import load_checkpoint, open_checkpoint
from tests.helpers import as_args

pytestmark = pytest.mark.slow
STEPS = 20


def losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def train_args(out: Path, over: dict, extra=(), resume: bool = False) -> list[str]:
    return ["train", "--out", str(out), *map(str, as_args(over)), *map(str, extra)] + (["--resume"] if resume else [])


def train(out: Path, over: dict, nproc: int = 1, extra=(), script: str | None = None, resume: bool = False):
    """`blocklab train` in a process of its own, or under torchrun with `nproc` processes (a driver
    script instead of the package's entry point when given)."""
    entry = ["-c", script] if script else ["-m", "blocklab"]
    if nproc > 1 and script:
        entry = ["--no-python", sys.executable, *entry]
    return launch(nproc, entry + train_args(out, over, extra, resume))


def launch(nproc: int, cmd: list[str]) -> subprocess.CompletedProcess:
    """python `cmd`, or torchrun `cmd` with `nproc` processes."""
    if nproc > 1:
        cmd = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *cmd]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env, timeout=600)


def train_here(out: Path, over: dict, extra=(), resume: bool = False) -> None:
    """`blocklab train` in this process, without torchrun: a one-process run, seconds cheaper than a
    new interpreter; one device's peak fixed as in TOGETHER (measuring bf16's takes seconds)."""
    with mock.patch.object(trainer, "peak_for", lambda device, precision: 1e9):
        assert main(train_args(out, over, [*extra, "--no-progress"], resume)) == 0


def train_together(runs: list[list[str]], prelude: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    """`blocklab train` with each of `runs` (argument lists), one after another in one torchrun start of
    2 processes, after the code `prelude` (TOGETHER). Returns the process and the stderr of each run
    (rank 0's lines: where a run says something, rank 0 says it)."""
    script = TOGETHER.replace("PRELUDE", prelude)
    p = launch(2, ["--no-python", sys.executable, "-c", script, json.dumps([[str(a) for a in r] for r in runs])])
    return p, p.stderr.split(RUN_MARK)[1:]


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
            "checkpoint_every": 10,  # steps 10 and 20 (a save costs a collective write and a hash)
            "lr": 3e-3,
            "schedule": "constant",
            "warmup_steps": 0,
            "device": "cpu",
        },
    }


# Runs that need no torchrun start of their own. A run closes its process group when it ends
# (Dist.close), and torchrun's store keeps that group's keys: each later run gets a new group here, under
# keys of its own; the first run makes its group from torchrun's environment as every single run does
# (or finds the one a prelude left it). The peak of one device is fixed: the reference FSDP run checks
# the MFU, and the measured peak varies with load (it changes no loss).
RUN_MARK = "==> blocklab train, run "
TOGETHER = r"""
import json, os, sys
import torch.distributed as dist
PRELUDE
import blocklab.training.trainer as tr
tr.peak_for = lambda device, precision: 1e9  # one device's peak, fixed
from blocklab.cli import main
for i, args in enumerate(json.loads(sys.argv[1])):
    if i:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", store=dist.PrefixStore(f"run-{i}", store), rank=rank, world_size=world)
    if os.environ["RANK"] == "0":
        print(f"MARK{i}", file=sys.stderr, flush=True)
    rc = main(args)
    if rc:
        sys.exit(rc)  # at once: torchrun stops the other process
""".replace("MARK", RUN_MARK)

KILL_DURING_SHARDED_SAVE = r"""
import os, signal, sys
import blocklab.training.sharded as sh
real = sh.finish
def dying(root, tmp, step, keep, known=None):
    if step == LAST:  # every shard of the last step is written: tear one, then die like kill -9 before finishing
        shard = tmp / "dcp" / "__1_0.distcp"
        shard.write_bytes(shard.read_bytes()[:100])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(root, tmp, step, keep, known)
sh.finish = dying
from blocklab.cli import main
sys.exit(main(sys.argv[1:]))
""".replace("LAST", str(STEPS))


def damage(ckpt: Path) -> None:
    """Reverse the bytes of the checkpoint's last shard: __1_0 of one written by 2 processes, which
    rank 0 verifies; __0_0 of one written by one process, which rank 1 verifies (open_sharded splits
    the manifest's sorted files between the processes)."""
    shard = sorted((ckpt / "dcp").glob("*.distcp"))[-1]
    shard.write_bytes(shard.read_bytes()[::-1])


@dataclass
class Runs:
    root: Path
    killed: subprocess.CompletedProcess  # fsdp's first start, killed -9 in its last save
    together: subprocess.CompletedProcess  # the start that trained the rest
    fallback: str  # one-then-2's stderr: a resume past its damaged latest checkpoint

    def __truediv__(self, name: str) -> Path:
        return self.root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory, over) -> Runs:
    root = tmp_path_factory.mktemp("fsdp")
    fsdp = ["--train.parallel", "fsdp"]
    train_here(root / "one", over)
    killed = train(root / "fsdp", over, 2, fsdp, script=KILL_DURING_SHARDED_SAVE)
    shutil.copytree(root / "fsdp", root / "killed")
    # from step 10 of the killed run in one process: one-process checkpoints of steps 15 and 20
    shutil.copytree(root / "killed", root / "half-on-1")
    train_here(root / "half-on-1", over, fsdp + ["--train.checkpoint_every", "5"], resume=True)
    shutil.copytree(root / "half-on-1", root / "one-then-2")
    damage(root / "one-then-2" / "checkpoints" / f"step-{STEPS:08d}")
    together, logs = train_together(
        [
            train_args(root / "fsdp", over, fsdp, resume=True),  # first: a process group of its own making
            train_args(
                root / "accum", over, fsdp + ["--train.grad_accum", "2", "--train.activation_checkpointing", "true"]
            ),
            train_args(root / "ddp-accum", over, ["--train.grad_accum", "2"]),
            train_args(root / "one-then-2", over, fsdp, resume=True),
        ]
    )
    ok(together)
    return Runs(root, killed, together, logs[3])


def test_fsdp_equals_one_process(runs):
    one = losses(runs / "one")
    assert len(one) == STEPS and one[-1] < one[0] - 0.3  # it learns
    assert losses(runs / "killed") == pytest.approx(one, rel=1e-5)  # the uninterrupted 20 steps
    s = summary(runs / "fsdp")  # written by its resume (the kill left none)
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
    full = losses(runs / "killed")  # the uninterrupted 20 steps: logged before the kill
    on2, on1 = losses(runs / "fsdp"), losses(runs / "half-on-1")
    assert len(full) == STEPS and on2 == full  # the same processes from step 10: bit for bit
    assert on1[:10] == full[:10] and on1[10:] == pytest.approx(full[10:], rel=1e-5)
    assert summary(runs / "half-on-1")["world_size"] == 1


def test_one_process_checkpoint_resumes_on_2(runs):
    ckdir = runs / "one-then-2" / "checkpoints"
    assert open_checkpoint(ckdir, step=STEPS - 5)["meta"]["world_size"] == 1  # half-on-1's
    assert f"using the checkpoint of step {STEPS - 5}" in runs.fallback  # the one it resumed from
    assert losses(runs / "one-then-2") == pytest.approx(losses(runs / "one"), rel=1e-5)
    assert open_checkpoint(ckdir)["meta"]["world_size"] == 2


def test_kill_9_during_sharded_save_keeps_the_previous_checkpoint(runs):
    assert runs.killed.returncode != 0
    ckdir = runs / "killed" / "checkpoints"  # as the kill left it
    assert (ckdir / "latest").read_text() == "step-00000010" and list(ckdir.glob(f".tmp-step-{STEPS:08d}-*"))
    assert open_checkpoint(ckdir)["step"] == 10  # complete and verified
    # fsdp is that run resumed on 2 processes: the torn save is gone and the same steps trained again
    assert not list((runs / "fsdp" / "checkpoints").glob(".tmp-*"))
    assert losses(runs / "fsdp") == losses(runs / "killed")


def test_a_damaged_shard_sends_every_process_back_and_none_left_stops_them_all(runs, over, tmp_path):
    """The processes verify the files between them: a damaged latest checkpoint sends all of them back to the
    same older one and the resume goes on; with none left that verifies, all of them stop with one line (none
    waits in a collective: the timeout would say so)."""
    log = runs.fallback  # one-then-2: its latest checkpoint's shard, which rank 1 verifies, damaged
    assert runs.together.returncode == 0, runs.together.stderr[-3000:]
    assert "does not match its checksum" in log and f"using the checkpoint of step {STEPS - 5}" in log
    assert summary(runs / "one-then-2")["step"] == STEPS
    run = tmp_path / "run"
    shutil.copytree(runs / "one-then-2", run)
    for ckpt in (run / "checkpoints").glob("step-*"):  # 20 by 2 processes, 15 by one: ranks 0 and 1 find them
        damage(ckpt)
    p = train(run, over, 2, ["--train.parallel", "fsdp", "--train.steps", STEPS + 10], resume=True)
    assert p.returncode != 0
    assert "does not match its checksum" in p.stderr
    assert "[rank0]: Traceback" not in p.stderr and "[rank1]: Traceback" not in p.stderr


def test_mfu_is_the_whole_jobs(runs):
    """The global batch's tokens/s over the peak of both processes' devices."""
    s = summary(runs / "fsdp")
    assert s["peak_flops_per_s"] == 2e9
    assert s["mfu"] == pytest.approx(s["tokens_per_s"] * s["flops_per_token"] / 2e9, rel=1e-9)
