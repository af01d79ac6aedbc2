"""`blocklab check`: every attention path on this device against the reference, and side by side in speed.

Correctness: forward output and the gradients of q, k, v and the gains, against the materialised
formula in float64 on the same input values, in each of the device's dtypes, causal and
bidirectional with right padding, at a T below one kernel tile and one spanning several.
Speed: forward + backward at the paper's T=128 and at T=1024, 4096, in the device's fast dtype, and
each shaped path's time over plain causal SDPA's at the same shape (the yardstick: what attention
without shaping costs). The recommendation names the fastest correct shaped path per range of T.
A path that cannot run here is reported unavailable with the reason, never as a crash; a backend with
no kernel for some inputs (dtype, mask) is checked on the others and the skipped cases are named.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend

from blocklab.bench import check_paths
from blocklab.bench.check_paths import PATHS, SDPA_BACKENDS, YARDSTICK, compile_settings, make_inputs, reference
from blocklab.bench.check_report import auto_line, failure_text, path_verdict, recommend, unsupported_note
from blocklab.bench.machine import available_memory, describe, machine_info
from blocklab.bench.timing import time_step

GRAD_NAMES = ("q", "k", "v", "alpha", "beta", "gamma")
CASES = (("causal", True, False), ("padded", False, True))  # (name, causal, right padding)
CHECK_T = (17, 300)
CHECK_SHAPE = dict(B=2, H=3, D=64)
SHAPES = (128, 1024, 4096)
SPEED_D = 64
# The interpreter runs the Triton kernel in numpy, element by element: minutes at T=300, and its
# timings mean nothing. Its tl.dot on bf16 tiles returns garbage (triton 3.9: a 16x16 bf16 dot is
# off by 1e10), which says nothing about the GPU. Under it the fused path is checked in float32 at
# the small T only, and not timed.
INTERPRETER_MAX_T = 64
INTERPRETER_NOTE = f"Triton interpreter: checked in float32 at T <= {INTERPRETER_MAX_T} only, not timed"
# The compiled competitors are checked at the largest check T only (causal and padded): the sub-tile T
# exists for the fused kernel's tiling, while they run PyTorch's SDPA kernels (checked at both T on the
# sdpa path) and an elementwise and running-sum epilogue, which goes wrong at long T if anywhere. Each
# input signature costs a compile: seconds on CUDA, 5-30 s on CPU (inductor builds C++, ~5 files per
# forward + backward). So on CPU they are checked in the timed dtype only (fp32; the sdpa path checks
# CPU bf16) and timed at T <= COMPILED_CPU_MAX_T, where the timing batch is >= 2 and the dynamic graph
# the check compiled serves (check_paths): 2 graphs per backend, the graphs it times.
COMPILED_CPU_MAX_T = 512
# B x H x T x T elements times this many bytes: a generous peak of the materialised forward +
# backward (scores, probabilities, the fp32 mix of I, A and C, its bf16 copy, their gradients).
TT_BYTES_PER_ELEMENT = 32


def device_dtypes(device: str) -> list[torch.dtype]:
    """float32 everywhere; bfloat16 where the device has it (fp16 on older GPUs), as autocast runs it."""
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return [torch.float32, torch.float16]
    return [torch.float32, torch.bfloat16]


def fast_dtype(device: str) -> torch.dtype:
    """What training runs in: bf16 autocast on CUDA; fp32 on CPU, where bf16 is no faster."""
    return device_dtypes(device)[1] if device == "cuda" else torch.float32


def tolerance(device: str, dtype: torch.dtype) -> float:
    """Largest acceptable max|x - ref| / max(1, max|ref|), outputs and gradients alike.

    Known-good paths, measured (CPU here, H100): fp32 without TF32 stays below 2e-6; bf16 reaches
    1.5e-2 on the gain gradients (PyTorch's own flash SDPA too: each is one sum over B*T*D products
    of bf16-rounded values) and 1e-2 elsewhere; a fp32 Triton kernel with TF32 dots (10-bit
    mantissa, unit roundoff 5e-4) reaches 3e-3 on dq and dk, where dS = P (dP - delta) cancels.
    Bugs seen (a gain's gradient over several key blocks, a wrong mask or centring) cost 0.1 or
    more. So: fp32 on CPU 1e-4 (no TF32 there; 50x above rounding, 1000x below a bug), fp32 on
    CUDA 5e-3 (TF32 allowed), bf16/fp16 5e-2 (3x above the worst good path, 3x below the bugs).
    """
    if dtype == torch.float32:
        return 5e-3 if device == "cuda" else 1e-4
    return 5e-2


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max|x - ref| / max(1, max|ref|), in float64; nan/inf when x is not finite."""
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).abs().max() / max(1.0, float(ref.abs().max())))


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _autocast(device: str, dtype: torch.dtype):
    """The model's low-precision setting: autocast with fp32 gains (see training.trainer)."""
    return torch.autocast(device, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()


def _check_case(path, device: str, dtype, T: int, case, seed: int) -> dict:
    name, causal, padded = case
    inputs = make_inputs(CHECK_SHAPE["B"], CHECK_SHAPE["H"], T, CHECK_SHAPE["D"], dtype, device, padded, seed)
    rec = {"dtype": str(dtype).removeprefix("torch."), "T": T, "case": name}
    if path.supports is not None:
        why = path.supports(torch.device(device), dtype, T, CHECK_SHAPE["D"], causal, inputs.key_mask)
        if why is not None:
            return dict(rec, skipped=why, ok=True)
    ref, ref_leaves = reference(path.kind, inputs, causal)
    grad_out = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    grad_out = grad_out.to(device)
    ref_grads = torch.autograd.grad(ref, ref_leaves, grad_out)
    with _autocast(device, dtype):
        out = path.fn(*inputs.args(path.kind), causal, inputs.key_mask)
    grads = torch.autograd.grad(out, inputs.grad_leaves(path.kind), grad_out.to(out.dtype))
    tol = tolerance(device, dtype)
    errs = {"out": rel_err(out, ref)}
    errs.update((f"grad {n}", rel_err(g, r)) for n, g, r in zip(GRAD_NAMES, grads, ref_grads))
    worst = max(errs, key=lambda k: errs[k] if math.isfinite(errs[k]) else math.inf)
    return {
        **rec,
        "tol": tol,
        "errors": errs,
        "worst": worst,
        "ok": all(e <= tol for e in errs.values()),
    }  # nan <= tol is False


def check_correctness(path, device: str, dtypes, check_T, progress) -> dict:
    """Every (dtype, T, case) of one path; stops at the first exception, which counts as wrong."""
    records = []
    for dtype in dtypes:
        for T in check_T:
            for i, case in enumerate(CASES):
                try:
                    rec = _check_case(path, device, dtype, T, case, seed=1000 * T + i)
                except Exception as e:  # a crashing path is a wrong path; its message is the finding
                    where = f"{str(dtype).removeprefix('torch.')}, T={T}, {case[0]}"
                    raised = f"raised {type(e).__name__}: {_first_line(e)} ({where})"
                    return {"ok": False, "records": records, "raised": raised}
                records.append(rec)
                if "skipped" in rec:
                    progress(f"{path.name}: {rec['dtype']} T={T} {case[0]}: skipped, {rec['skipped']}")
                    continue
                progress(
                    f"{path.name}: {rec['dtype']} T={T} {case[0]}: "
                    f"worst {rec['worst']} {rec['errors'][rec['worst']]:.1e} (tol {rec['tol']:g})"
                    + ("" if rec["ok"] else "  WRONG")
                )
    return {"ok": all(r["ok"] for r in records), "records": records}


def speed_shape(device: str, T: int) -> tuple[int, int]:
    """(B, H) of the timing at T: B*T tokens about constant, 16k on CUDA; far fewer on CPU to finish in a minute."""
    if device == "cuda":
        return max(1, 16384 // T), 12
    return max(1, 1024 // T), 2


def time_paths(paths, device: str, T: int, reps: int, warmup: int, progress) -> dict:
    """Median forward+backward milliseconds of each path at T, causal, timed round-robin.

    Interleaving the paths rep by rep lets a slow drift of a shared machine hit all of them alike.
    """
    B, H = speed_shape(device, T)
    dtype = fast_dtype(device)
    inputs = make_inputs(B, H, T, SPEED_D, dtype, device, padded=False)
    result, steps = {}, {}
    for path in paths:
        need = B * H * T * T * TT_BYTES_PER_ELEMENT
        free = available_memory(device)
        why = path.supports and path.supports(torch.device(device), dtype, T, SPEED_D, True, None)
        if why:
            result[path.name] = {"skipped": "no kernel", "reason": why}
            continue
        if path.tt_matrix and free is not None and need > 0.6 * free:
            result[path.name] = {"skipped": "memory", "need_bytes": need}
            continue
        args, leaves = inputs.args(path.kind), inputs.grad_leaves(path.kind)

        def step(path=path, args=args, leaves=leaves):
            with _autocast(device, dtype):
                out = path.fn(*args, True, None)
            torch.autograd.grad(out, leaves, torch.ones_like(out))

        try:
            for _ in range(max(1, warmup)):  # at least one: it finds out of memory before the timed reps
                time_step(step, device)
        except torch.OutOfMemoryError:
            result[path.name] = {"skipped": "memory"}
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        except Exception as e:  # correct at the check's T but broken at this one: the run goes on, the path fails
            result[path.name] = {"skipped": "raised", "raised": f"raised {type(e).__name__}: {_first_line(e)} (T={T})"}
            continue
        steps[path.name] = step
    names = list(steps)
    times = {name: [] for name in names}
    for r in range(reps if names else 0):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(time_step(steps[name], device))
    for name, ts in times.items():
        result[name] = {"ms": 1000 * statistics.median(ts), "times_ms": [1000 * t for t in ts]}
    progress(
        f"T={T} (B={B}, H={H}, {str(dtype).removeprefix('torch.')}): "
        + ", ".join(
            f"{n} {r['ms']:.2f} ms" if "ms" in r else f"{n} skipped ({r['skipped']})" for n, r in result.items()
        )
    )
    return {
        "B": B,
        "H": H,
        "D": SPEED_D,
        "dtype": str(dtype).removeprefix("torch."),
        "sdpa_backend": _sdpa_choice(inputs.args("softmax")),
        "paths": result,
    }


def _sdpa_choice(qkv) -> str | None:
    """The backend SDPA's own dispatch picks for causal q, k, v like these (the yardstick runs it)."""
    try:
        picked = SDPBackend(torch._fused_sdp_choice(*(t.detach() for t in qkv), is_causal=True))
        return next((name for name, b in SDPA_BACKENDS.items() if b == picked), picked.name.lower())
    except Exception:  # a private function: absent or changed in another PyTorch
        return None


def max_errors(records: list[dict]) -> dict:
    """{dtype: {"fwd": worst output error, "grads": worst gradient error}} over a path's checked cases."""
    out: dict[str, dict] = {}
    for r in records:
        if "skipped" in r:
            continue
        e = out.setdefault(r["dtype"], {"fwd": 0.0, "grads": 0.0})
        e["fwd"] = max(e["fwd"], r["errors"]["out"])
        e["grads"] = max([e["grads"]] + [v for k, v in r["errors"].items() if k != "out"])
    return out


def _check_one(path, device: str, dtypes, check_T, shapes, progress) -> dict:
    """One path's correctness entry (status, reason, errors); its speed is filled in by run_check."""
    entry = {"kind": path.kind, "baseline": path.baseline, "speed": {}, "impl": path.impl, "backend": path.backend}
    if path.compiled:
        entry["compiled"] = True
    dev = torch.device(device)
    reason = path.unavailable(dev)
    if reason is None and path.supports is not None:  # no kernel for the timed case: nothing to compare
        reason = path.supports(dev, fast_dtype(device), min(shapes or check_T), SPEED_D, True, None)
    if reason is not None:
        return dict(entry, status="unavailable", reason=reason)
    t0 = time.perf_counter()
    if path.name == "fused" and device != "cuda":  # the Triton interpreter
        Ts = [T for T in check_T if T <= INTERPRETER_MAX_T] or [min(check_T)]
        res = check_correctness(path, device, [torch.float32], Ts, progress)
        entry.update(note=INTERPRETER_NOTE, speed={str(T): {"skipped": "interpreter"} for T in shapes})
    elif path.compiled:
        res = check_correctness(
            path, device, dtypes if device != "cpu" else [fast_dtype(device)], [max(check_T)], progress
        )
        if device == "cpu":
            skip = {"skipped": f"cpu, T>{COMPILED_CPU_MAX_T}"}
            entry["speed"] = {str(T): dict(skip) for T in shapes if T > COMPILED_CPU_MAX_T}
    else:
        res = check_correctness(path, device, dtypes, check_T, progress)
    entry.update(
        check_s=time.perf_counter() - t0,  # kernel compilation included
        correctness=res,
        max_err=max_errors(res["records"]),
        unsupported=unsupported_note(res["records"]),
        status="correct" if res["ok"] else "wrong",
    )
    if not res["ok"]:
        entry["reason"] = failure_text(res)
    elif not entry["max_err"]:
        entry.update(status="unavailable", reason=f"no kernel for any checked case: {entry['unsupported']}")
    return entry


def run_check(
    device: str,
    dtypes=None,
    shapes=SHAPES,
    progress: Callable[[str], None] = lambda s: None,
    reps: int | None = None,
    warmup: int | None = None,
    check_T=None,
    paths=None,
    compiled: bool = True,
) -> dict:
    """Check and time every attention path (or those named in `paths`) on `device` ("cpu" or "cuda");
    compiled=False leaves out the compiled competitors (sdpa-compiled:*), which cost a compile per input."""
    check_T = list(check_T or CHECK_T)
    dtypes = list(dtypes or device_dtypes(device))
    shapes = list(shapes)
    reps = reps or (20 if device == "cuda" else 5)
    warmup = warmup if warmup is not None else (3 if device == "cuda" else 1)
    chosen = [PATHS[n] for n in (paths or PATHS) if compiled or not PATHS[n].compiled]
    settings = compile_settings() if any(p.compiled for p in chosen) else contextlib.nullcontext()
    with settings:
        out = {path.name: _check_one(path, device, dtypes, check_T, shapes, progress) for path in chosen}
        timed = [p for p in chosen if out[p.name]["status"] != "unavailable"]
        timing = {}
        for T in shapes:
            now = [p for p in timed if str(T) not in out[p.name]["speed"]]
            t = timing[str(T)] = time_paths(now, device, T, reps, warmup, progress)
            for name, r in t.pop("paths").items():
                out[name]["speed"][str(T)] = r
                if "raised" in r and out[name]["status"] == "correct":
                    out[name].update(status="wrong", reason=r["raised"])
            yard = out.get(YARDSTICK, {}).get("speed", {}).get(str(T), {})
            for r in out.values():
                s, b = r["speed"].get(str(T), {}), out.get(r["baseline"], {}).get("speed", {}).get(str(T), {})
                if "ms" in s and "ms" in b:
                    s["speedup"] = b["ms"] / s["ms"]
                if "ms" in s and "ms" in yard and r["kind"] == "shaped":
                    s["vs_yardstick"] = s["ms"] / yard["ms"]
    for name, entry in out.items():
        entry["verdict"] = path_verdict(name, entry, shapes, entry["baseline"])
    auto_said, auto_warns = auto_line(device, out, shapes)
    return {
        "device": device,
        "machine": describe(machine_info(device)),
        "dtypes": [str(d).removeprefix("torch.") for d in dtypes],
        "tolerances": {str(d).removeprefix("torch."): tolerance(device, d) for d in dtypes},
        "check_shape": dict(CHECK_SHAPE, T=list(check_T)),
        "cases": [c[0] for c in CASES],
        "shapes": shapes,
        "reps": reps,
        "warmup": warmup,
        "timing": timing,
        "yardstick": YARDSTICK,
        "compiled": {
            "run": compiled,
            "backend": check_paths.COMPILE_BACKEND,
            "check_T": max(check_T),
            "cpu_dtype": str(fast_dtype("cpu")).removeprefix("torch."),
            "cpu_max_T": COMPILED_CPU_MAX_T,
        },
        "paths": out,
        "auto": {"line": auto_said, "warning": auto_warns},
        "recommendation": recommend(out, shapes),
        "ok": all(e["status"] != "wrong" for e in out.values()),
    }
