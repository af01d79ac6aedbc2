#!/usr/bin/env bash
# The GPU measurements the attention work needs, in parts that each fit one call of at most 10 minutes (a
# session's device time is short and rare). The 2026-11-28 H100 session ran all of them in one call with shorter
# limits and every step ran out of time (benchmarks/RESULTS.md, "GPU session of 2026-11-28"): Triton's autotuning
# compiles for tens of seconds per kernel configuration. Each step has its own time limit and writes
# OUT/NAME.txt (stdout), NAME.err and, where the tool has one, NAME.json; a step that fails or runs out of time
# does not stop the others; at the end everything is packed into OUT/session-PART.tgz (a call brings back at most
# 8 files). Then copy the tables into benchmarks/RESULTS.md with the device named (the files name it).
#   OUT=$OUT bash benchmarks/gpu_session.sh kernel   # the kernel's tests, then the kernel against plain SDPA
#   OUT=$OUT bash benchmarks/gpu_session.sh check    # blocklab check with the compiled competitors
#   OUT=$OUT bash benchmarks/gpu_session.sh bench    # the he-codeparrot bench, eager and compiled
#   OUT=$OUT bash benchmarks/gpu_session.sh muon     # Muon's step against AdamW's at the he-codeparrot shape
#   OUT=$OUT bash benchmarks/gpu_session.sh blocks   # issue 44's blocks against Pre-LN, eager, with peak memory
#   OUT=$OUT bash benchmarks/gpu_session.sh blocks-compiled-1   # NormFormer and OLMo 2 against Pre-LN, compiled
#   OUT=$OUT bash benchmarks/gpu_session.sh blocks-compiled-2   # Frac-Connections and MUDDFormer, likewise
# On the H200 `blocks` and `bench` took 423 s together; each of issue 44's blocks took 71-74 s to compile its
# first step (Pre-LN 20 s), so the compiled comparison is two parts of two blocks each.
set -uo pipefail
PART="${1:-kernel}"
case "$PART" in
kernel | check | bench | muon | blocks | blocks-compiled-1 | blocks-compiled-2) ;;
*)
    echo "gpu_session.sh: unknown part '$PART'; give kernel, check, bench, muon, blocks, blocks-compiled-1 or -2" >&2
    exit 2
    ;;
esac
OUT="${OUT:-gpu-session}"
mkdir -p "$OUT/$PART"
LOG="$OUT/$PART"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG/install.txt" 2>&1
nvidia-smi >"$LOG/nvidia-smi.txt" 2>&1
export BLOCKLAB_FUSED_AUTOTUNE="${BLOCKLAB_FUSED_AUTOTUNE:-1}"

step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$LOG/$name.txt" 2>"$LOG/$name.err"
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$LOG/steps.txt"
    tail -n 25 "$LOG/$name.txt"
}

BENCH=(--blocks pre-ln,sas-p --shape he-codeparrot --precision bf16 --reps 5 --no-memory)
case "$PART" in
kernel)  # 300 + 240 s
    step pytest-attention 300 python3 -m pytest -q -p no:cacheprovider tests/attention/test_fused_v3.py \
        tests/attention/test_fused.py tests/attention/test_fused_model.py
    step kernel-vs-sdpa 240 python3 benchmarks/kernel_vs_sdpa.py --reps 10 --compiled --json "$LOG/kernel-vs-sdpa.json"
    ;;
check)  # 520 s
    step check 520 blocklab check --device cuda --shapes 128,1024,4096 --reps 10 --json "$LOG/check.json"
    ;;
bench)  # 170 + 250 s. On CUDA auto is the fused kernel, so the compiled step names only sdpa beside it, and
    # keeps one tile configuration per kernel: autotuning inside inductor ran past every earlier limit.
    step bench-eager 170 blocklab bench "${BENCH[@]}" --attn-impl auto \
        --extra sas-p:bf16:eager:fused,sas-p:bf16:eager:sdpa --json "$LOG/bench-eager.json"
    BLOCKLAB_FUSED_AUTOTUNE=0 step bench-compiled 250 blocklab bench "${BENCH[@]}" --compile --attn-impl auto \
        --extra sas-p:bf16:compile:sdpa --json "$LOG/bench-compiled.json"
    ;;
muon)  # 300 s: each round times every block's step with Muon and with AdamW (issue 45)
    step muon-vs-adamw 300 blocklab bench "${BENCH[@]}" --blocks pre-ln,sas-p,ngpt --optimizer muon --vs-adamw \
        --json "$LOG/muon-vs-adamw.json"
    ;;
blocks)  # 130 s: NormFormer, OLMo 2, Frac-Connections and MUDDFormer against Pre-LN (softmax attention: no Triton)
    step blocks-eager 130 blocklab bench --blocks pre-ln,normformer,olmo2,frac-connections,muddformer \
        --shape he-codeparrot --precision bf16 --reps 5 --json "$LOG/blocks-eager.json"
    ;;
blocks-compiled-1)  # 300 s
    step blocks-compiled 300 blocklab bench --blocks pre-ln,normformer,olmo2 --shape he-codeparrot --precision bf16 \
        --reps 5 --compile --no-memory --json "$LOG/blocks-compiled.json"
    ;;
blocks-compiled-2)  # 300 s
    step blocks-compiled 300 blocklab bench --blocks pre-ln,frac-connections,muddformer --shape he-codeparrot \
        --precision bf16 --reps 5 --compile --no-memory --json "$LOG/blocks-compiled.json"
    ;;
esac
tar czf "$OUT/session-$PART.tgz" -C "$OUT" "$PART"
