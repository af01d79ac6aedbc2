"""Is CPU training bit-for-bit deterministic across processes, and under which conditions?

Launches N fresh Python processes per condition; each trains the same tiny blocklab model for a fixed
number of steps (the Python API, on a small corpus copied from the standard library, with a data cache
prepared once beforehand) and reports its per-step losses at full precision (repr of the floats in
metrics.jsonl). The runs of every condition are then compared bit for bit: how many distinct loss
sequences, the largest absolute difference, and the first step (and significant digit) where they part.

Conditions are machine load (`idle`, or `loaded`: busy-loop processes running for the whole condition,
started --settle seconds before the first run so that the load average has risen) crossed with
environment variants (see VARIANTS) and modes (`fresh`: one process trains steps 1..N; `resume`: one
process dies before step C+1 (C = 12 in the test config, so its last checkpoint is step 10, as in the
resume tests), a second process resumes from that checkpoint, and the stitched losses are compared with
the fresh runs; `cli`, `cli_resume`: the same through `blocklab.cli.main(["train", ...])`, the path of
tests/cli/test_train_cli.py, which imports every subcommand's module). Every child also records what it could see of
its threading: torch.get_num_threads(), omp_get_dynamic(), MKL's dynamic flag and CNR branch, the OS
thread count and how many threads used CPU time, and a per-step fingerprint of the team size that
at::parallel_for actually used (the bits of a float32 sum of 2^20 numbers depend on the split).

    python benchmarks/determinism.py --runs 16 --out /tmp/det
    python benchmarks/determinism.py --runs 12 --out /tmp/det --conditions loaded --variants default,t1
    python benchmarks/determinism.py --analyse /tmp/det          # the tables again, from results.jsonl
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

# name -> (environment of the child process, options the child applies itself before/after `import torch`)
VARIANTS = {
    "default": ({}, {}),
    "nodyn": ({"OMP_DYNAMIC": "FALSE", "MKL_DYNAMIC": "FALSE"}, {}),
    "ompdyn": ({"OMP_DYNAMIC": "TRUE"}, {}),  # libgomp's dynamic mode on: the hypothesis made explicit
    "cbwr": ({"MKL_CBWR": "COMPATIBLE"}, {}),
    "cbwr_strict": ({"MKL_CBWR": "AUTO,STRICT"}, {}),
    "t1": ({"OMP_NUM_THREADS": "1"}, {}),
    "t1_pyenv": ({}, {"pyenv": {"OMP_NUM_THREADS": "1"}}),  # set by os.environ.setdefault before import torch
    "t1_setnt": ({}, {"set_num_threads": 1}),  # torch.set_num_threads(1) after import torch
    # the recommended fix, set as the entry module would: os.environ.setdefault before `import torch`
    "fix_pyenv": ({}, {"pyenv": {"MKL_CBWR": "AUTO,STRICT", "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}}),
    "alloc": ({}, {"alloc_shift": True}),  # random-sized allocations before the model is built
    "pytest_env": ({"TRITON_INTERPRET": "1"}, {}),  # what tests/conftest.py exports to the CLI tests' processes
}

CONFIGS = {
    # tests/conftest.py's `overrides` fixture: the config of the exact-resume tests
    "test": {
        "data": {"vocab_size": 512, "seq_len": 32},
        "model": {"block": "sas-p", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
        "train": {
            "steps": 20,
            "batch_size": 4,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "lr": 3e-3,
        },
    },
    # larger matrices: more of the work is big enough for MKL and ATen to split it over threads
    "small": {
        "data": {"vocab_size": 512, "seq_len": 64},
        "model": {"block": "sas-p", "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 256},
        "train": {
            "steps": 30,
            "batch_size": 8,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "lr": 3e-3,
        },
    },
    # big enough that ATen's reductions (e.g. weight gradients of the norms, sums over 2,048 tokens x 256)
    # are split over threads: where the thread count starts to matter
    "medium": {
        "data": {"vocab_size": 512, "seq_len": 128},
        "model": {"block": "sas-p", "d_model": 256, "n_layers": 2, "n_heads": 4, "d_ff": 1024},
        "train": {
            "steps": 10,
            "batch_size": 16,
            "log_every": 1,
            "eval_every": 10,
            "eval_batches": 2,
            "checkpoint_every": 5,
            "lr": 3e-3,
        },
    },
}
CUT = {
    "test": 12,
    "small": 22,
    "medium": 7,
}  # resume mode: the first process dies before this step: resumes from 10 (20)
PROBE_N = 1 << 20


# ----------------------------------------------------------------------------------------------- child
def _threads_info() -> dict:
    cpu = []
    for task in Path("/proc/self/task").iterdir():
        try:
            f = (task / "stat").read_text().rsplit(")", 1)[1].split()
            cpu.append((int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
        except (OSError, IndexError, ValueError):
            pass
    return {
        "os_threads": len(cpu),
        "busy_threads": sum(c >= 0.05 for c in cpu),
        "thread_cpu_s": sorted((round(c, 2) for c in cpu), reverse=True)[:6],
    }


def child(spec: dict) -> None:
    for k, v in spec.get("pyenv", {}).items():
        os.environ.setdefault(k, v)
    load0 = os.getloadavg()[0]
    import ctypes

    import torch

    from blocklab.training.config import load_config
    from blocklab.training.trainer import Trainer, train

    if spec.get("set_num_threads"):
        torch.set_num_threads(spec["set_num_threads"])
    lib = Path(torch.__file__).parent / "lib"
    gomp, tcpu = ctypes.CDLL(str(lib / "libgomp.so.1")), ctypes.CDLL(str(lib / "libtorch_cpu.so"))
    keep = []
    if spec.get("alloc_shift"):  # shift the heap and the allocator's free lists by random amounts
        import random

        rnd = random.Random(os.urandom(8))
        keep = [torch.empty(rnd.randint(1, 1 << 20)).fill_(1.0) for _ in range(rnd.randint(1, 8))]
        keep += [bytearray(rnd.randint(1, 1 << 16)) for _ in range(rnd.randint(1, 64))]

    # Team-size fingerprint: the bits of this sum depend on how at::parallel_for split it.
    probe = torch.randn(PROBE_N, generator=torch.Generator().manual_seed(1234))
    refs = {repr(v): n for n, v in spec["probe_refs"].items()}
    teams = collections.Counter()
    real_step = Trainer.train_step
    crash = spec.get("crash_after")

    def step(self, i):
        if crash is not None and i == crash:
            raise SystemExit(0)  # a crash right after step `crash` finished, as tests/training's resume test
        loss = real_step(self, i)
        teams[refs.get(repr(probe.sum().item()), "other")] += 1
        return loss

    Trainer.train_step = step
    t0 = time.perf_counter()
    try:
        if spec.get("cli"):  # `blocklab train` as the CLI tests run it (all subcommand modules imported)
            from blocklab.cli import main as cli_main

            argv = ["train", "--out", spec["out"]] + (["--resume"] if spec.get("resume") else [])
            argv += [
                tok for sec, kv in spec["overrides"].items() for k, v in kv.items() for tok in (f"--{sec}.{k}", str(v))
            ]
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                rc = cli_main(argv)
            assert rc == 0, rc
        else:
            cfg = load_config(None, spec["overrides"])
            train(cfg, spec["out"], resume=spec.get("resume", False), progress=False, log=lambda *a, **k: None)
    except SystemExit:
        pass
    rows = [json.loads(x) for x in (Path(spec["out"]) / "metrics.jsonl").read_text().splitlines()]
    # Flush-to-zero / denormals-are-zero (MXCSR): the main thread (Python float) and every OpenMP thread
    # (a float32 tensor of subnormals, multiplied in parallel chunks): a changed MXCSR changes results.
    denormals_zeroed = {
        "python": (5e-324 * 1.0) == 0.0,
        "torch": int(((torch.full((PROBE_N,), 1e-40) * 1.5) == 0).sum()),
    }
    print(
        "RESULT "
        + json.dumps(
            {
                "losses": [r["loss"] for r in rows if "loss" in r],
                "eval": [r["eval_loss"] for r in rows if "eval_loss" in r],
                "train_s": round(time.perf_counter() - t0, 2),
                "load_start": load0,
                "load_end": os.getloadavg()[0],
                "get_num_threads": torch.get_num_threads(),
                "omp_dynamic": gomp.omp_get_dynamic(),
                "omp_max_threads": gomp.omp_get_max_threads(),
                "mkl_dynamic": tcpu.mkl_serv_get_dynamic(),
                "mkl_max_threads": tcpu.mkl_serv_get_max_threads(),
                "mkl_cbwr": tcpu.mkl_serv_cbwr_get(1),
                "team_sizes": dict(teams),
                "denormals_zeroed": denormals_zeroed,
                **_threads_info(),
            }
        ),
        flush=True,
    )


# ---------------------------------------------------------------------------------------------- parent
def probe_refs() -> dict:
    import torch

    probe = torch.randn(PROBE_N, generator=torch.Generator().manual_seed(1234))
    old, refs = torch.get_num_threads(), {}
    for n in range(1, (os.cpu_count() or 1) + 1):
        torch.set_num_threads(n)
        refs[str(n)] = probe.sum().item()
    torch.set_num_threads(old)
    return refs


CODE: Path | None = None  # the blocklab source the children import (None: the installed one)


def run_child(spec: dict, env_extra: dict, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "MKL_", "KMP_", "GOMP_"))}
    env.update(env_extra, BLOCKLAB_CACHE=str(cache))
    if CODE is not None:
        env["PYTHONPATH"] = str(CODE)
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True, text=True)
    lines = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1][7:])


def one_run(args, mode: str, variant: str, tag: str, refs: dict, corpus: Path, cache: Path) -> dict:
    env_extra, opts = VARIANTS[variant]
    overrides = json.loads(json.dumps(CONFIGS[args.config]))
    overrides["data"]["source"] = str(corpus)
    run_dir = Path(args.out) / "runs" / tag
    base = dict(opts, overrides=overrides, out=str(run_dir), probe_refs=refs)
    if mode.startswith("cli"):
        base["cli"] = True
    if mode in ("fresh", "cli"):
        r = run_child(base, env_extra, cache)
        parts = [r]
    else:
        a = run_child(dict(base, crash_after=CUT[args.config]), env_extra, cache)
        b = run_child(dict(base, resume=True), env_extra, cache)
        r = dict(b)
        parts = [a, b]
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"losses": r["losses"], "eval": r["eval"], "parts": parts}


def start_loaders(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_loaders(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()  # only the processes this script started, by their own handle
    for p in procs:
        p.wait()


def run_condition(args, cond, modes, variants, refs, corpus, cache, results: Path) -> None:
    t_start = time.time()
    for i in range(args.runs):  # interleaved: every variant sees the same load over time
        for mode in modes:
            for variant in variants:
                t0 = time.time()
                r = one_run(args, mode, variant, f"{cond}-{mode}-{variant}-{i}", refs, corpus, cache)
                rec = {
                    "config": args.config,
                    "condition": cond,
                    "mode": mode,
                    "variant": variant,
                    "i": i,
                    "wall_s": round(time.time() - t0, 2),
                    **r,
                }
                with open(results, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                p = r["parts"][-1]
                print(
                    f"{cond} {mode} {variant} #{i}: last loss {r['losses'][-1]!r} load "
                    f"{p['load_start']:.2f} teams {p['team_sizes']} busy threads {p['busy_threads']} "
                    f"({rec['wall_s']} s)",
                    flush=True,
                )
                if args.max_minutes and time.time() - t_start > 60 * args.max_minutes:
                    print(f"{cond}: time budget reached; next condition", flush=True)
                    return


def measure(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus, cache = out / "corpus", out / "cache"
    if not corpus.is_dir():  # tests/conftest.py's corpus: two standard-library packages (~0.5 MB)
        corpus.mkdir()
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        for pkg in ("json", "email"):
            for f in (stdlib / pkg).glob("*.py"):
                shutil.copy(f, corpus / f"{pkg}_{f.name}")
    global CODE
    if args.code == "head":  # a snapshot of the committed code: the working tree may be mid-edit
        CODE = out / "code" / "src"
        if not CODE.is_dir():
            (out / "code").mkdir(exist_ok=True)
            here = Path(__file__).resolve().parents[1]
            repo = here if (here / "src" / "blocklab").is_dir() else Path.cwd()  # else: a copy run from the repo
            tar = subprocess.run(
                ["git", "-C", str(repo), "archive", "HEAD", "src"], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(out / "code")], input=tar, check=True)
        print(f"children import blocklab from {CODE}", flush=True)
    refs = probe_refs()
    print(f"team-size fingerprints: {refs}", flush=True)
    # Prepare the data cache once, so that no measured process does it (the tests share one cache too).
    one_run(args, "fresh", "default", "warmup", refs, corpus, cache)
    results = out / "results.jsonl"
    conditions, variants, modes = args.conditions.split(","), args.variants.split(","), args.modes.split(",")
    for cond in conditions:
        loaders = start_loaders(args.loaders) if cond == "loaded" else []
        try:
            if loaders:
                print(f"{cond}: {len(loaders)} busy loops, settling {args.settle:.0f} s", flush=True)
                time.sleep(args.settle)
            run_condition(args, cond, modes, variants, refs, corpus, cache, results)
        finally:
            stop_loaders(loaders)


def digits_agreeing(a: float, b: float) -> int:
    """How many leading significant decimal digits two floats share (17 when equal)."""
    if a == b:
        return 17
    sa, sb = f"{a:.16e}", f"{b:.16e}"
    if sa[-4:] != sb[-4:] or (a < 0) != (b < 0):
        return 0
    n = 0
    for x, y in zip(sa.replace(".", "").lstrip("-"), sb.replace(".", "").lstrip("-")):
        if x != y or x == "e":
            break
        n += 1
    return n


def compare(seqs: list[list[float]], ref: list[float] | None = None) -> dict:
    keys = collections.Counter(tuple(s) for s in seqs)
    ref = list(keys.most_common(1)[0][0]) if ref is None else ref
    worst, first_step, digits = 0.0, None, 17
    for s in seqs:
        for step, (a, b) in enumerate(zip(s, ref), 1):
            if a != b:
                worst = max(worst, abs(a - b))
                if first_step is None or step < first_step:
                    first_step = step
                digits = min(digits, digits_agreeing(a, b))
        if len(s) != len(ref):
            first_step = min(first_step or len(ref), min(len(s), len(ref)) + 1)
    n_same_as_ref = sum(1 for s in seqs if list(s) == list(ref))
    return {
        "runs": len(seqs),
        "distinct": len(keys),
        "same_as_ref": n_same_as_ref,
        "max_abs_diff": worst,
        "first_diff_step": first_step,
        "min_digits_agreeing": digits,
    }


def analyse(out: Path) -> str:
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]
    groups = collections.defaultdict(list)
    for r in recs:
        groups[(r["config"], r["condition"], r["mode"], r["variant"])].append(r)
    # the reference: the modal sequence of idle/fresh/default runs (the plain `blocklab train` case)
    refs = {}
    for (cfgname, cond, mode, var), rs in groups.items():
        if (cond, mode, var) == ("idle", "fresh", "default"):
            refs[cfgname] = list(collections.Counter(tuple(r["losses"]) for r in rs).most_common(1)[0][0])
    lines = [
        "| config | load | mode | env variant | runs | distinct loss sequences | max abs diff (within) "
        "| first diff step | same as idle/fresh/default ref | max abs diff vs ref | load avg (min-max) "
        "| at::parallel_for team sizes seen | omp_dynamic / mkl_dynamic / num_threads |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], list(VARIANTS).index(k[3]))):
        rs = groups[key]
        seqs = [r["losses"] for r in rs]
        within = compare(seqs)
        ref = refs.get(key[0])
        vs = compare(seqs, ref) if ref else None
        parts = [p for r in rs for p in r["parts"]]
        loads = [p["load_start"] for p in parts]
        teams = collections.Counter()
        for p in parts:
            teams.update(p["team_sizes"])
        flags = sorted({(p["omp_dynamic"], p["mkl_dynamic"], p["get_num_threads"]) for p in parts})
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {within['runs']} | {within['distinct']} "
            f"| {within['max_abs_diff']:.3g} | {within['first_diff_step'] or '-'} "
            f"| {vs['same_as_ref'] if vs else '?'}/{within['runs']} | {vs['max_abs_diff']:.3g} "
            f"| {min(loads):.1f}-{max(loads):.1f} | {dict(sorted(teams.items()))} "
            f"| {', '.join('/'.join(map(str, f)) for f in flags)} |"
            if vs
            else f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {within['runs']} | {within['distinct']} "
            f"| {within['max_abs_diff']:.3g} | {within['first_diff_step'] or '-'} | ? | ? "
            f"| {min(loads):.1f}-{max(loads):.1f} | {dict(sorted(teams.items()))} "
            f"| {', '.join('/'.join(map(str, f)) for f in flags)} |"
        )
    # Every distinct sequence across everything, with where it was seen.
    seen = collections.defaultdict(list)
    for r in recs:
        seen[(r["config"], tuple(r["losses"]))].append(f"{r['condition']}/{r['mode']}/{r['variant']}")
    lines += ["", "Distinct loss sequences over all runs (per config):", ""]
    for (cfgname, seq), where in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        ref = refs.get(cfgname)
        d = compare([list(seq)], ref) if ref else {}
        lines.append(
            f"- {cfgname}: {len(where)} runs, last loss {seq[-1]!r}, vs ref: first diff step "
            f"{d.get('first_diff_step') or '-'}, digits agreeing {d.get('min_digits_agreeing', '?')}, "
            f"max abs diff {d.get('max_abs_diff', float('nan')):.3g}; seen in "
            f"{dict(collections.Counter(where))}"
        )
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=12, help="runs per condition x mode x variant (default 12)")
    ap.add_argument("--out", help="output folder: results.jsonl (appended), summary.md, corpus/, cache/")
    ap.add_argument("--conditions", default="idle,loaded", help="comma list of idle, loaded (default both)")
    ap.add_argument(
        "--variants",
        default="default,nodyn,cbwr,t1,alloc",
        help=f"comma list of {', '.join(VARIANTS)} (default default,nodyn,cbwr,t1,alloc)",
    )
    ap.add_argument("--modes", default="fresh", help="comma list of fresh, resume, cli, cli_resume (default fresh)")
    ap.add_argument(
        "--config",
        default="test",
        choices=sorted(CONFIGS),
        help="model/run size (default test: the exact-resume tests' config)",
    )
    ap.add_argument("--loaders", type=int, default=3, help="busy-loop processes for `loaded` (default 3; keep <= 4)")
    ap.add_argument("--settle", type=float, default=45.0, help="seconds of load before the first loaded run")
    ap.add_argument(
        "--max-minutes", type=float, default=0, help="per condition: stop measuring it after this long (0: no limit)"
    )
    ap.add_argument(
        "--code",
        default="head",
        choices=("head", "installed"),
        help="blocklab code the children run: head (default: `git archive HEAD src` into OUT/code, so "
        "that edits in progress in the working tree do not matter) or installed",
    )
    ap.add_argument("--analyse", metavar="DIR", help="only print the tables of an earlier --out DIR")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if args.analyse:
        print(analyse(Path(args.analyse)))
        return
    if not args.out:
        ap.error("--out is required")
    for v in args.variants.split(","):
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    if args.loaders > 4:
        ap.error("--loaders: at most 4")
    measure(args)
    print(analyse(Path(args.out)))


if __name__ == "__main__":
    main()
