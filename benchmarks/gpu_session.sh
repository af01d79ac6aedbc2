#!/usr/bin/env bash
# Every GPU measurement the attention work needs, in one run of at most 10 minutes (a session's device time is
# short and rare). Each step has its own time limit and writes OUT/NAME.txt (stdout), NAME.err and, where the
# tool has one, NAME.json; a step that fails or runs out of time does not stop the others. Then copy the tables
# into benchmarks/RESULTS.md with the device named (the files name it).
#   OUT=$OUT bash benchmarks/gpu_session.sh      # on the device machine, from the repository root
# Steps (limits in seconds): the kernel's tests on the GPU (150), blocklab check with the compiled competitors
# (170), the kernel against plain causal SDPA at T = 128..16384, D = 64 and 128 (110), the he-codeparrot bench
# eager and compiled with auto, fused and sdpa (50 + 100).
set -uo pipefail
OUT="${OUT:-gpu-session}"
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.txt" 2>&1
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
export BLOCKLAB_FUSED_AUTOTUNE="${BLOCKLAB_FUSED_AUTOTUNE:-1}"

step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
    tail -n 25 "$OUT/$name.txt"
}

BENCH=(--blocks pre-ln,sas-p --shape he-codeparrot --precision bf16 --reps 5 --no-memory)
step pytest-attention 150 python3 -m pytest -q -p no:cacheprovider tests/attention/test_fused_v3.py tests/attention/test_fused.py tests/attention/test_fused_model.py
step check 170 blocklab check --device cuda --shapes 128,1024,4096 --reps 10 --json "$OUT/check.json"
step kernel-vs-sdpa 110 python3 benchmarks/kernel_vs_sdpa.py --reps 10 --compiled --json "$OUT/kernel-vs-sdpa.json"
step bench-eager 50 blocklab bench "${BENCH[@]}" --attn-impl auto --extra sas-p:bf16:eager:fused,sas-p:bf16:eager:sdpa --json "$OUT/bench-eager.json"
step bench-compiled 100 blocklab bench "${BENCH[@]}" --compile --attn-impl auto --extra sas-p:bf16:compile:fused,sas-p:bf16:compile:sdpa --json "$OUT/bench-compiled.json"
