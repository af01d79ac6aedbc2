"""Golden values: the behaviour of short training runs and of `blocklab probe`, pinned (issue 16).

A refactor that must not change behaviour (issue 16, "one trainer for every task, one home for
every block fact") has to reproduce, on the CPU, the numbers in ``tests/golden/golden.json``:

- every step's training loss (``train.log_every 1``), learning rate and gain values from
  ``metrics.jsonl``, the eval losses half-way and at the end (and BLEU for translation) and the
  summary numbers of a short run of each task: clm and mlm with Post-LN, Pre-LN and SAS-P (16
  steps); translation with Post-LN and Pre-LN (30 steps, dropout 0.1);
- the numbers in ``probes.json`` written by ``blocklab probe`` for Post-LN, Pre-LN and SAS-P at
  depths 2 and 4 (the loss, the hidden-state norms, the per-weight gradient norms and the token
  cosine similarities per layer, the last-FFN gradient against depth).

Comparison rule (per value, every value named by run and step or path on a mismatch):

- ``abs(new - golden) <= 1e-6 * max(1, abs(golden))``; integers (``n_params``, steps) and
  strings (``status``, the recorded keys) must be equal;
- training losses must in addition be bit-for-bit equal when this machine matches the one that
  wrote the golden file (same torch version, same CPU capability as ``torch.backends.cpu
  .get_cpu_capability()`` reports, same machine architecture): the code path is then the same,
  and a refactor that does not change behaviour reproduces the losses exactly. On another machine
  the kernels may differ in the last bits and only the tolerance applies.

Everything runs on the CPU with one intra-op thread, fp32, no compilation, fixed seeds, through
the stable command line of SPEC section 5 (``blocklab train`` / ``blocklab probe``, called in
process through ``blocklab.cli.main``), on data the test writes itself from a fixed
pseudo-random generator (no dependence on the interpreter's standard library): a folder of
synthetic code-like files and a synthetic ``.tsv`` language pair. Their sha256 are in the golden
file and checked first, so a changed corpus is reported as such, not as a changed loss.

Refreshing the golden file (``python -m tests.test_golden --regenerate``, from the repository
root) is allowed ONLY when behaviour is meant to change (a deliberate change to the model, the
data pipeline or the optimiser, stated in the commit message), never to make a refactor pass.
Generate it from the committed code, not from a working tree that holds edits in progress:

    git worktree add /tmp/golden-src HEAD
    PYTHONPATH=/tmp/golden-src/src .venv/bin/python -m tests.test_golden --regenerate
    git worktree remove --force /tmp/golden-src
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).parent / "golden" / "golden.json"
RTOL = 1e-6  # abs(new - golden) <= RTOL * max(1, abs(golden))
STEPS = 16

# ---------------------------------------------------------------------------------------------
# Data: written by the test from a fixed generator (splitmix64), identical on every machine and
# every Python version (no `random`, whose algorithms may change between versions).


class _Rng:
    def __init__(self, seed: int):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


_NAMES = [
    "value",
    "count",
    "total",
    "items",
    "index",
    "result",
    "buffer",
    "name",
    "path",
    "data",
    "size",
    "offset",
    "key",
    "node",
    "parent",
    "child",
    "token",
    "line",
    "text",
    "limit",
    "start",
    "stop",
]
_VERBS = [
    "get",
    "set",
    "load",
    "save",
    "parse",
    "build",
    "read",
    "write",
    "merge",
    "split",
    "check",
    "find",
    "update",
    "render",
    "encode",
    "decode",
]
_OPS = ["+", "-", "*", "//", "%"]
_CMPS = ["<", ">", "==", "!=", "<=", ">="]
_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "return",
    "value",
    "list",
    "each",
    "new",
    "from",
    "given",
    "with",
    "when",
    "first",
    "last",
    "item",
    "file",
    "line",
    "number",
    "string",
]


def _function(r: _Rng) -> str:
    name = f"{r.pick(_VERBS)}_{r.pick(_NAMES)}"
    args = [r.pick(_NAMES) for _ in range(1 + r.below(3))]
    args = list(dict.fromkeys(args))
    doc = " ".join(r.pick(_WORDS) for _ in range(4 + r.below(8))).capitalize()
    lines = [f"def {name}({', '.join(args)}):", f'    """{doc}."""']
    local = list(args)
    for _ in range(2 + r.below(5)):
        kind = r.below(4)
        var = r.pick(_NAMES)
        if kind == 0:
            lines.append(f"    {var} = {r.pick(local)} {r.pick(_OPS)} {r.below(100)}")
        elif kind == 1:
            lines += [
                f"    if {r.pick(local)} {r.pick(_CMPS)} {r.below(10)}:",
                f"        {var} = {r.pick(_VERBS)}_{r.pick(_NAMES)}({r.pick(local)})",
            ]
        elif kind == 2:
            lines += [
                f"    for {var} in range(len({r.pick(local)})):",
                f"        {r.pick(local)}.append({var} {r.pick(_OPS)} {r.below(10)})",
            ]
        else:
            lines.append(f"    {var} = [{', '.join(str(r.below(50)) for _ in range(1 + r.below(4)))}]")
        local.append(var)
    lines.append(f"    return {r.pick(local)}")
    return "\n".join(lines) + "\n"


def write_code_corpus(folder: Path, n_files: int = 48, seed: int = 16) -> str:
    """A folder of synthetic Python-like files; returns the sha256 over (name, content) pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    r = _Rng(seed)
    h = hashlib.sha256()
    for i in range(n_files):
        body = f'"""Module {i}: generated for the golden test."""\nimport os\n\n\n'
        body += "\n\n".join(_function(r) for _ in range(6 + r.below(6)))
        name = f"mod_{i:02d}.py"
        (folder / name).write_text(body, encoding="utf-8")
        h.update(name.encode() + b"\0" + body.encode() + b"\0")
    return h.hexdigest()


_SRC = ["Haus", "Baum", "Katze", "Hund", "Auto", "Tisch", "Buch", "Stadt", "Fluss", "Berg", "rot", "klein"]
_TGT = ["house", "tree", "cat", "dog", "car", "table", "book", "city", "river", "mountain", "red", "small"]


def write_pairs(path: Path, n: int = 240, seed: int = 17) -> str:
    """A word-for-word language pair as a .tsv (source TAB target); returns its sha256."""
    r = _Rng(seed)
    lines = []
    for _ in range(n):
        idx = [r.below(len(_SRC)) for _ in range(3 + r.below(5))]
        lines.append(" ".join(_SRC[i] for i in idx) + "\t" + " ".join(_TGT[i] for i in idx))
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# The runs. "{code}" and "{pairs}" stand for the data written above.

# An evaluation half-way as well as at the end: it must not disturb the training that follows.
_COMMON_TRAIN = {
    "steps": STEPS,
    "batch_size": 4,
    "lr": 3e-3,
    "warmup_steps": 2,
    "log_every": 1,
    "eval_every": STEPS // 2,
    "eval_batches": 2,
    "checkpoint_every": STEPS,
    "seed": 0,
    "precision": "fp32",
    "compile": "false",
    "device": "cpu",
}
_LM_DATA = {"source": "{code}", "vocab_size": 512, "seq_len": 32, "val_fraction": 0.1}
_LM_MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64}
# Post-LN in Xiong et al.'s setting (LayerNorm, Xavier); Pre-LN and SAS-P with the defaults.
_LM_BLOCKS = {"post-ln": {"norm": "layernorm", "init": "xavier"}, "pre-ln": {}, "sas-p": {}}


def _lm(task: str, block: str) -> dict:
    return {
        "model": {"task": task, "block": block, **_LM_MODEL, **_LM_BLOCKS[block]},
        "data": dict(_LM_DATA),
        "train": dict(_COMMON_TRAIN),
    }


def _translation(block: str) -> dict:
    return {
        "model": {
            "task": "translation",
            "block": block,
            "d_model": 32,
            "n_layers": 2,
            "n_heads": 2,
            "d_ff": 64,
            "norm": "layernorm",
            "init": "xavier",
            "dropout": 0.1,
        },
        "data": {"source": "{pairs}", "vocab_size": 300, "seq_len": 24, "val_fraction": 0.1},
        # 30 steps at lr 1e-2: enough for a BLEU above zero (about 1.4), still under a second
        "train": {
            **_COMMON_TRAIN,
            "steps": 30,
            "eval_every": 15,
            "checkpoint_every": 30,
            "batch_size": 8,
            "lr": 1e-2,
            "optimizer": "adam",
            "schedule": "inv_sqrt",
            "warmup_steps": 4,
            "weight_decay": 0.0,
            "label_smoothing": 0.1,
        },
    }


RUNS: dict[str, dict] = {
    **{f"clm/{b}": _lm("clm", b) for b in ("post-ln", "pre-ln", "sas-p")},
    **{f"mlm/{b}": _lm("mlm", b) for b in ("post-ln", "pre-ln", "sas-p")},
    **{f"translation/{b}": _translation(b) for b in ("post-ln", "pre-ln")},
}

PROBE_ARGS = [
    "--blocks",
    "post-ln,pre-ln,sas-p",
    "--depths",
    "2,4",
    "--seeds",
    "2",
    "--batches",
    "1",
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--d-ff",
    "64",
    "--data",
    "{code}",
    "--vocab-size",
    "512",
    "--seq-len",
    "32",
    "--batch-size",
    "4",
    "--no-ablation",
    "--device",
    "cpu",
    "--no-progress",
]

# metrics.jsonl keys that measure time, not behaviour
_TIMING = ("tokens_per_s", "mfu", "time", "seconds", "wall", "elapsed", "eta")
# summary.json keys pinned (when present)
_SUMMARY = (
    "status",
    "step",
    "n_params",
    "final_loss",
    "final_eval_loss",
    "best_eval_loss",
    "unigram_entropy",
    "final_bleu",
    "best_bleu",
)


def _fill(value, paths: dict):
    return value.format(**paths) if isinstance(value, str) else value


def _argv(over: dict, paths: dict) -> list[str]:
    return [tok for s, kv in over.items() for k, v in kv.items() for tok in (f"--{s}.{k}", str(_fill(v, paths)))]


@contextlib.contextmanager
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _cli(argv: list[str]) -> None:
    from blocklab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _one_thread(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc != 0:
        raise AssertionError(f"blocklab {' '.join(argv)} exited {rc}:\n{err.getvalue()[-3000:]}")


def _is_timing(key: str) -> bool:
    return any(t in key for t in _TIMING)


def train_values(name: str, paths: dict, out: Path) -> dict:
    """Run one golden training run; return {"steps": [{key: value}...], "summary": {...}}."""
    _cli(["train", "--out", str(out), "--no-progress", *_argv(RUNS[name], paths)])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [{k: v for k, v in row.items() if not _is_timing(k)} for row in rows]
    summary = json.loads((out / "summary.json").read_text())
    return {"steps": steps, "summary": {k: summary[k] for k in _SUMMARY if k in summary}}


def probe_values(paths: dict, out: Path) -> dict:
    _cli(["probe", "--out", str(out), *[_fill(a, paths) for a in PROBE_ARGS]])
    r = json.loads((out / "probes.json").read_text())
    return {"results": r["results"], "last_ffn_vs_depth": r.get("last_ffn_vs_depth")}


def write_data(root: Path) -> tuple[dict, dict]:
    """The data of every run under `root`: ({placeholder: path}, {placeholder: sha256})."""
    paths = {"code": str(root / "code"), "pairs": str(root / "pairs.tsv")}
    hashes = {"code": write_code_corpus(root / "code"), "pairs": write_pairs(root / "pairs.tsv")}
    return paths, hashes


def _fingerprint() -> dict:
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
    }


# ---------------------------------------------------------------------------------------------
# Comparison


def compare(golden, new, where: str, exact: bool, errors: list[str]) -> None:
    """Append to `errors` one line per value of `new` that differs from `golden` (rule: module docstring)."""
    if isinstance(golden, dict):
        if not isinstance(new, dict) or set(golden) != set(new):
            missing = sorted(set(golden) - set(new or {})) if isinstance(new, dict) else "?"
            extra = sorted(set(new) - set(golden)) if isinstance(new, dict) else "?"
            errors.append(f"{where}: keys differ (missing {missing}, unexpected {extra})")
        for k in golden:
            if isinstance(new, dict) and k in new:
                compare(golden[k], new[k], f"{where}/{k}", exact, errors)
    elif isinstance(golden, list):
        if not isinstance(new, list) or len(golden) != len(new):
            errors.append(f"{where}: length {len(new) if isinstance(new, list) else new!r} != golden {len(golden)}")
            return
        for i, (g, n) in enumerate(zip(golden, new)):
            compare(g, n, f"{where}[{i}]", exact, errors)
    elif isinstance(golden, float) or isinstance(new, float):
        if not isinstance(new, (int, float)) or isinstance(new, bool) or not isinstance(golden, (int, float)):
            errors.append(f"{where}: {new!r} != golden {golden!r}")
            return
        g, n = float(golden), float(new)
        if math.isnan(g) and math.isnan(n):
            return
        if exact:
            if n != g:
                errors.append(f"{where}: {n!r} != golden {g!r} (diff {n - g:.3g}; bit-for-bit required)")
        elif not abs(n - g) <= RTOL * max(1.0, abs(g)):
            errors.append(f"{where}: {n!r} != golden {g!r} (diff {n - g:.3g} > {RTOL:g} * max(1, |golden|))")
    elif golden != new:
        errors.append(f"{where}: {new!r} != golden {golden!r}")


def _train_errors(name: str, golden: dict, new: dict, exact_losses: bool) -> list[str]:
    errors: list[str] = []
    g_steps, n_steps = golden["steps"], new["steps"]
    if [r.get("step") for r in g_steps] != [r.get("step") for r in n_steps]:
        errors.append(
            f"{name}: logged steps {[r.get('step') for r in n_steps]} != golden {[r.get('step') for r in g_steps]}"
        )
    for g, n in zip(g_steps, n_steps):
        where = f"{name} step {g.get('step')}"
        if set(g) != set(n):
            errors.append(
                f"{where}: keys differ (missing {sorted(set(g) - set(n))}, unexpected {sorted(set(n) - set(g))})"
            )
        for k in g:
            if k in n:
                compare(g[k], n[k], f"{where} {k}", exact_losses and k == "loss", errors)
    compare(golden["summary"], new["summary"], f"{name} summary", False, errors)
    return errors


# ---------------------------------------------------------------------------------------------
# The tests


@pytest.fixture(scope="module")
def golden() -> dict:
    if not GOLDEN.is_file():
        pytest.fail(f"{GOLDEN} is missing; write it with `python -m tests.test_golden --regenerate` (see docstring)")
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def data(golden, tmp_path_factory) -> dict:
    paths, hashes = write_data(tmp_path_factory.mktemp("golden-data"))
    assert hashes == golden["data_sha256"], (
        "the golden test's own data changed (its generator was edited): "
        f"{hashes} != {golden['data_sha256']}; the golden values no longer apply"
    )
    return paths


@pytest.fixture(scope="module")
def exact(golden) -> bool:
    """Bit-for-bit training losses where the machine matches the one that wrote the golden file."""
    return _fingerprint() == golden["fingerprint"]


@pytest.mark.parametrize("name", list(RUNS))
def test_training_losses_match_golden(name, golden, data, exact, tmp_path):
    assert golden["runs"][name]["config"] == RUNS[name], f"{name}: the run's config differs from the golden one"
    new = train_values(name, data, tmp_path / "run")
    errors = _train_errors(name, golden["runs"][name]["values"], new, exact)
    if errors:
        pytest.fail(
            f"{len(errors)} value(s) of {name} differ from {GOLDEN.name}:\n" + "\n".join(errors[:40]), pytrace=False
        )


@pytest.mark.slow
def test_probe_matches_golden(golden, data, tmp_path):
    assert golden["probe"]["args"] == PROBE_ARGS, "the probe's arguments differ from the golden ones"
    new = probe_values(data, tmp_path / "probe")
    errors: list[str] = []
    compare(golden["probe"]["values"], new, "probe", False, errors)
    if errors:
        pytest.fail(
            f"{len(errors)} value(s) of blocklab probe differ from {GOLDEN.name}:\n" + "\n".join(errors[:40]),
            pytrace=False,
        )


# ---------------------------------------------------------------------------------------------
# Regeneration (deliberate behaviour changes only; see the module docstring)


def regenerate(path: Path = GOLDEN) -> dict:
    import blocklab

    src = Path(blocklab.__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = None, None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["BLOCKLAB_CACHE"] = str(tmp / "cache")
        paths, hashes = write_data(tmp / "data")
        runs = {}
        for name, over in RUNS.items():
            print(f"golden: {name}", file=sys.stderr)
            runs[name] = {"config": over, "values": train_values(name, paths, tmp / "runs" / name.replace("/", "_"))}
        print("golden: probe", file=sys.stderr)
        probe = {"args": PROBE_ARGS, "values": probe_values(paths, tmp / "probe")}
    golden = {
        "about": "Golden values of issue 16; compared by tests/test_golden.py. Refresh only when behaviour is "
        "meant to change (python -m tests.test_golden --regenerate, from the committed code).",
        "commit": commit,
        "package_dirty": dirty,
        "package": str(src),
        "fingerprint": _fingerprint(),
        "python": platform.python_version(),
        "threads": 1,
        "rule": f"abs(new - golden) <= {RTOL:g} * max(1, |golden|); training losses bit-for-bit when the "
        "fingerprint matches",
        "data_sha256": hashes,
        "runs": runs,
        "probe": probe,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(golden, indent=1) + "\n")
    return golden


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.test_golden --regenerate   (only when behaviour is meant to change)")
    if not torch.cuda.is_available():  # as tests/conftest.py does, before blocklab is imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
    g = regenerate()
    print(f"wrote {GOLDEN} from commit {g['commit']} ({len(g['runs'])} runs and the probe)")
