"""`blocklab train` and `blocklab generate` as a user runs them: processes, signals, exit codes, one-line errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blocklab.cli import main
from tests.cli.forked import Server
from tests.helpers import as_args


def blocklab(*args, env_extra=None, **kw):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "blocklab", *map(str, args)], capture_output=True, text=True, env=env, **kw
    )


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """The commands below that are processes fork from one that imported torch and blocklab once
    (tests/cli/forked.py): the signals, kills and exit codes are a process's, without its 5 s of imports."""
    server = Server(tmp_path_factory.mktemp("forked"))
    yield server
    server.close()


def losses(run: Path):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def computed(run: Path) -> list[dict]:
    """Every value metrics.jsonl's rows compute from the model (losses, gains, gradient norms), not timings."""
    rows = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    keep = ("step", "loss", "eval_loss")
    return [{k: v for k, v in r.items() if k in keep or k.startswith(("gain/", "grad/"))} for r in rows]


KILL_DURING_CHECKPOINT = r"""
import os, signal, sys
import blocklab.training.checkpoint as ck
real = ck.save_file
def dying(tensors, path):
    if "step-00000015" in str(path):  # half-write the step-15 checkpoint, then die like kill -9
        real(tensors, path)
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(tensors, path)
ck.save_file = dying
from blocklab.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_kill_9_during_checkpoint_write_then_resume(tmp_path, overrides, forked):
    p = forked.run(["train", "--out", tmp_path / "cut", *as_args(overrides)], script=KILL_DURING_CHECKPOINT)
    assert p.returncode == -signal.SIGKILL
    ckdir = tmp_path / "cut" / "checkpoints"
    assert (ckdir / "latest").read_text() == "step-00000010" and list(ckdir.glob(".tmp-step-00000015-*"))
    r = forked.run(["train", "--out", tmp_path / "cut", "--resume", *as_args(overrides)])
    assert r.returncode == 0, r.stderr
    assert not list(ckdir.glob(".tmp-*"))  # the half-written folder was cleaned up
    full = forked.run(["train", "--out", tmp_path / "full", *as_args(overrides)])
    assert full.returncode == 0, full.stderr
    assert losses(tmp_path / "cut") == losses(tmp_path / "full")


def interrupt(forked: Server, out: Path, args, rows: int, sig) -> dict:
    """`blocklab train --out out *args`, sent `sig` once metrics.jsonl has `rows` rows."""
    proc = forked.start(["train", "--out", out, *args])
    deadline = time.time() + 120
    while time.time() < deadline:
        if (out / "metrics.jsonl").is_file() and len((out / "metrics.jsonl").read_text().splitlines()) >= rows:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_checkpoint_and_exits_cleanly(tmp_path, overrides, sig, forked):
    overrides["train"].update(steps=100_000, checkpoint_every=100_000, warmup_steps=0)
    out = tmp_path / "r"
    summary = interrupt(forked, out, as_args(overrides), 3, sig)
    assert summary["status"] == "interrupted" and summary["step"] >= 3
    assert (out / "checkpoints" / "latest").read_text() == f"step-{summary['step']:08d}"
    # The same command with --resume goes on from there (and stops again at the next signal).
    again = interrupt(forked, out, ["--resume", *as_args(overrides)], summary["step"] + 2, sig)
    assert again["status"] == "interrupted" and again["step"] >= summary["step"] + 2
    assert [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())] == list(
        range(1, again["step"] + 1)
    )


def one_line_error(capsys, argv, *words):
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    # Status lines (data: ...) go to stderr too, before the error; the error itself is one line, the last.
    err = captured.err.strip()
    errors = [line for line in err.splitlines() if line.startswith("blocklab ")]
    assert rc != 0 and len(errors) == 1 and err.endswith(errors[0]) and "Traceback" not in err, err
    assert not captured.out, captured.out
    for w in words:
        assert w in errors[0], (w, err)


def test_bad_input_gives_one_line(tmp_path, overrides, capsys):
    base = ["train", "--out", tmp_path / "r"]
    one_line_error(capsys, base + as_args(overrides) + ["--model.block", "gpt2"], "gpt2", "sas-p")
    one_line_error(capsys, base + as_args(overrides) + ["--model.n_heads", "3"], "n_heads")
    one_line_error(capsys, base + as_args(overrides) + ["--train.lr", "0"], "train.lr")
    one_line_error(capsys, base + as_args(overrides) + ["--train.warmup_steps", "50"], "warmup_steps")
    one_line_error(capsys, base + as_args(overrides) + ["--train.colour", "red"], "train.colour")
    one_line_error(capsys, base + as_args(overrides) + ["--data.source", tmp_path / "missing"], "missing")
    one_line_error(capsys, base + ["--resume"] + as_args(overrides), "nothing to resume")
    one_line_error(capsys, ["train", tmp_path / "none.toml", "--out", tmp_path / "r"], "not found")
    assert main([str(a) for a in base + as_args(overrides) + ["--train.steps", "3"]]) == 0
    capsys.readouterr()
    one_line_error(capsys, base + as_args(overrides), "already holds a run")
    (tmp_path / "r" / "checkpoints" / "step-00000003" / "optimizer.safetensors").write_bytes(b"garbage")
    one_line_error(capsys, base + ["--resume"] + as_args(overrides) + ["--train.steps", "3"], "corrupted")


def test_an_out_that_is_a_file_gives_one_line(tmp_path, overrides, capsys):
    (tmp_path / "f").write_text("mine")
    for mode in ([], ["--resume"], ["--overwrite"]):
        one_line_error(capsys, ["train", "--out", tmp_path / "f", *mode, *as_args(overrides)], "is a file")
    assert (tmp_path / "f").read_text() == "mine"


@pytest.mark.slow
def test_subprocess_error_has_no_traceback(tmp_path):
    r = blocklab("train", "--out", tmp_path / "r", "--model.block", "nope")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_help_lists_every_field_with_default():
    r = blocklab("train", "--help")
    assert r.returncode == 0
    for word in (
        "--model.block",
        "--model.beta_ff",
        "--data.source",
        "--data.mask_prob",
        "--train.warmup_steps",
        "--train.grad_clip",
        "--train.precision",
        "default:",
    ):
        assert word in r.stdout, word


@pytest.mark.slow
def test_generate_continues_the_prompt(tmp_path, overrides, capsys):
    assert main([str(a) for a in ["train", "--out", tmp_path / "r", *as_args(overrides)]]) == 0
    capsys.readouterr()
    assert main(["generate", "--run", str(tmp_path / "r"), "--prompt", "def parse(", "--max-new-tokens", "20"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("def parse(") and len(text) > len("def parse(") + 5
    one_line_error(capsys, ["generate", "--run", tmp_path / "nothing", "--prompt", "x"], "no blocklab run")


@pytest.mark.slow
@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_torchrun_ddp_matches_single_process(tmp_path, overrides, task, forked):
    overrides["model"]["task"] = task
    # gloo on the CPU: the comparison is exact there, and a 1-GPU machine cannot host 2 CUDA ranks.
    overrides["train"].update(steps=6, eval_every=3, device="cpu")
    single = forked.run(["train", "--out", tmp_path / "one", *as_args(overrides)])
    assert single.returncode == 0, single.stderr
    # `python -m torch.distributed.run ...` (torchrun) forked from the server: its two workers are the
    # fresh `python -u -m blocklab train ...` processes it starts.
    cmd = [
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "blocklab",
        "train",
        "--out",
        tmp_path / "two",
        *as_args(overrides),
    ]
    ddp = forked.run(cmd, module="torch.distributed.run", env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(a) == len(b) == 6  # only rank 0 writes
    assert a == pytest.approx(b, rel=1e-4)
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["world_size"] == 2


HELD = r"""
import os, random, sys
import torch
if sys.argv.pop(1) == "shifted":
    keep = [torch.empty(random.Random(os.urandom(8)).randint(1, 1 << 20)).fill_(1.0) for _ in range(4)]
import torch._dynamo, blocklab.training.trainer  # the slow imports (they compute nothing)
from blocklab.cli import main
print("imported", flush=True)
sys.stdin.readline()  # then trains when told
sys.exit(main(sys.argv[1:]))
"""
BUSY = "print(flush=True)\nwhile True: pass"  # says when it spins


def held(heap: str, out: Path, args, env) -> subprocess.Popen:
    """`blocklab train --out out *args` that imports, then waits for a line on stdin to train."""
    return subprocess.Popen(
        [sys.executable, "-c", HELD, heap, "train", "--out", str(out), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_bits_do_not_depend_on_load_or_heap_layout(tmp_path, overrides):
    """README's statement of when a CPU run is bit-exact: a process beside two busy loops, its heap
    shifted by random allocations, trains the same bits as a quiet one (benchmarks/determinism.py
    measures more conditions)."""
    # 8 steps, not 20 (each step runs the same reductions on the same shapes), and of each step every
    # value computed from the model is compared: the loss, the gains and gradient norms, the evaluations.
    overrides["train"].update(steps=8, eval_every=4)
    args = [*map(str, as_args(overrides))]
    # Two threads, not the suite's one: the claim is about threaded reductions, which load could reorder.
    env = dict(os.environ, OMP_NUM_THREADS="2")
    # Both import at once; then the quiet one trains alone, then the other one beside two busy loops.
    procs = [held("quiet", tmp_path / "quiet", args, env), held("shifted", tmp_path / "busy", args, env)]
    busy = []
    try:
        for p in procs:
            assert p.stdout.readline() == "imported\n", p.communicate(timeout=60)[1]
        quiet, loaded = procs
        _, err = quiet.communicate("go\n", timeout=600)
        assert quiet.returncode == 0, err
        busy = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True) for _ in range(2)]
        assert [b.stdout.readline() for b in busy] == ["\n", "\n"]
        _, err = loaded.communicate("go\n", timeout=600)
    finally:
        for p in procs + busy:
            p.kill()
            p.wait()
    assert loaded.returncode == 0, err
    assert losses(tmp_path / "busy") == losses(tmp_path / "quiet")
    rows = computed(tmp_path / "quiet")
    assert computed(tmp_path / "busy") == rows and [r["step"] for r in rows] == list(range(1, 9))
    assert sum("eval_loss" in r for r in rows) == 2 and all(any(k.startswith("grad/") for k in r) for r in rows)
