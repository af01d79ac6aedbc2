#!/usr/bin/env bash
# compare --launcher ray against the local launcher (issue 42, item 6): the `quick` preset (the demo) on a local
# two-node Ray cluster of one CPU each, against `compare --jobs 2` on the same machine; both train two runs at a
# time of one thread each. About 8 minutes each on an idle 2-core machine: run it when nothing else does.
#
#   bash benchmarks/ray_vs_local.sh [OUT]        # OUT: a fresh folder (default /tmp/ray-vs-local)
#
# Writes OUT/local/ and OUT/ray/ (the two sweeps, no report), OUT/ray_vs_local.json and OUT/ray_vs_local.md (the
# table for benchmarks/RESULTS.md): each launcher's wall time (the compare command, start to exit, the init probes
# included) and its time to verdicts.json (the sweep's runs alone), the runs' own training time (summary.json's
# wall_time_s summed), the overhead per run ((ray - local) time to verdicts.json x 2 / runs: the extra time each
# run cost with two at a time), the cluster's start (not in the ray figures), and whether the two
# verdicts.json agree (throughput figures aside). The nodes stay on loopback aliases (127.0.0.2 head, 127.0.0.3
# worker) with Ray's token authentication on; only the two `ray start` processes this script started are stopped
# (never `ray stop`, which ends every Ray process of the user). PY picks the interpreter (default .venv/bin/python,
# else python3); BASE_PORT the first of the 90 ports the nodes use (default 47000); ARGS more compare options for
# both launchers (a quick check of this script: ARGS="--experiments he --seeds 0 --train.steps 5").
set -euo pipefail
OUT="${1:-/tmp/ray-vs-local}"
PY="${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
RAY="$(dirname "$PY")/ray"
[ -x "$RAY" ] || RAY=ray
BASE="${BASE_PORT:-47000}"
read -r -a EXTRA <<<"${ARGS:-}"
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
    echo "$OUT is not empty: give a fresh folder" >&2
    exit 2
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
TMP="$(mktemp -d /tmp/rvl.XXXXXX)"  # Ray's temp dirs: short paths (Unix sockets take 107 characters at most)
export RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0
RAY_AUTH_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
export RAY_AUTH_TOKEN
unset RAY_ADDRESS
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PIDS=()

stop_nodes() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap stop_nodes EXIT

node() {  # node NAME IP FIRST_PORT [ray start options...]: one node of 1 CPU, its own ports and temp dir
    local name=$1 ip=$2 p=$3
    shift 3
    "$RAY" start --block --node-ip-address "$ip" --num-cpus 1 --num-gpus 0 --temp-dir "$TMP/$name" \
        --disable-usage-stats --node-manager-port $((p)) --object-manager-port $((p + 1)) \
        --dashboard-agent-listen-port $((p + 2)) --dashboard-agent-grpc-port $((p + 3)) \
        --metrics-export-port $((p + 4)) --runtime-env-agent-port $((p + 5)) \
        --min-worker-port $((p + 10)) --max-worker-port $((p + 29)) "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=($!)
    local waited=0
    until grep -q "Ray runtime started" "$OUT/$name.log"; do
        sleep 1
        waited=$((waited + 1))
        if [ $waited -gt 300 ] || ! kill -0 "${PIDS[-1]}" 2>/dev/null; then
            echo "ray start on $ip did not start (log: $OUT/$name.log)" >&2
            exit 1
        fi
    done
}

seconds() { "$PY" -c 'import time; print(f"{time.time():.3f}")'; }

# Each launcher with a cache of its own, empty: both prepare the data (tokenizer, encoded corpus) as a first sweep
# on a machine does; the nodes take theirs from the environment `ray start` gives them.
echo "local: compare --preset quick --jobs 2" >&2
load_local=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(seconds)
BLOCKLAB_CACHE="$OUT/cache-local" "$PY" -m blocklab compare --preset quick --out "$OUT/local" --jobs 2 --no-report --no-progress "${EXTRA[@]}" \
    >"$OUT/local.log" 2>&1
t1=$(seconds)

echo "ray: a head on 127.0.0.2 and a worker on 127.0.0.3, 1 CPU each" >&2
export BLOCKLAB_CACHE="$OUT/cache-ray"
c0=$(seconds)
node head 127.0.0.2 $((BASE + 30)) --head --port "$BASE" --ray-client-server-port $((BASE + 1)) \
    --include-dashboard false --dashboard-host 127.0.0.2 --dashboard-port $((BASE + 2))
node worker 127.0.0.3 $((BASE + 30 + 30)) --address "127.0.0.2:$BASE"
c1=$(seconds)
echo "ray: compare --preset quick --launcher ray" >&2
load_ray=$(cut -d' ' -f1-3 /proc/loadavg)
r0=$(seconds)
"$PY" -m blocklab compare --preset quick --out "$OUT/ray" --launcher ray --ray-address "127.0.0.2:$BASE" \
    --no-report --no-progress "${EXTRA[@]}" >"$OUT/ray.log" 2>&1
r1=$(seconds)

"$PY" - "$OUT" "$t0" "$t1" "$c0" "$c1" "$r0" "$r1" "$load_local" "$load_ray" <<'EOF'
import json
import platform
import re
import sys
from pathlib import Path

from blocklab.run_summary import read_summary

out = Path(sys.argv[1])
t0, t1, c0, c1, r0, r1 = map(float, sys.argv[2:8])
load_local, load_ray = sys.argv[8:10]


def runs(sweep):
    return {p.parent.name: read_summary(p.parent) for p in (out / sweep / "runs").glob("*/summary.json")}


def scores(value):  # verdicts.json less its measured throughput
    if isinstance(value, dict):
        return {k: scores(v) for k, v in value.items() if k not in ("tokens_per_s", "measured_alone")}
    if isinstance(value, list):
        return [scores(v) for v in value]
    return re.sub(r"throughput [0-9.]+x ([^ ]+)( \(runs shared the machine\))?", r"\1", value) if isinstance(value, str) else value


local, ray = runs("local"), runs("ray")
# Start to verdicts.json: the training, without the init probes and report that follow in both (the same work in
# the same process, whichever launcher; on a loaded machine their time swings more than the launchers differ).
local_sweep = (out / "local" / "verdicts.json").stat().st_mtime - t0
ray_sweep = (out / "ray" / "verdicts.json").stat().st_mtime - r0
n = len(local)
same = scores(json.loads((out / "local" / "verdicts.json").read_text())) == scores(
    json.loads((out / "ray" / "verdicts.json").read_text())
)
found = {
    "machine": f"{platform.node()}, Python {platform.python_version()}",
    "runs": n,
    "local_wall_s": round(t1 - t0, 1),
    "ray_wall_s": round(r1 - r0, 1),
    "cluster_start_s": round(c1 - c0, 1),
    "local_training_s": round(sum(s.wall_time_s for s in local.values()), 1),
    "ray_training_s": round(sum(s.wall_time_s for s in ray.values()), 1),
    "local_sweep_s": round(local_sweep, 1),
    "ray_sweep_s": round(ray_sweep, 1),
    "overhead_per_run_s": round((ray_sweep - local_sweep) * 2 / max(n, 1), 2),
    "ray_nodes": sorted({s.get("ray_node_id", "")[:8] for s in ray.values()}),
    "same_verdicts": same,
    "load_average_at_start": {"local": load_local, "ray": load_ray},
}
(out / "ray_vs_local.json").write_text(json.dumps(found, indent=2) + "\n")
table = f"""| launcher | runs | wall (s) | to verdicts.json (s) | runs' training (s, summed) |
|---|---:|---:|---:|---:|
| local, `--jobs 2` | {n} | {found['local_wall_s']} | {found['local_sweep_s']} | {found['local_training_s']} |
| ray, 2 nodes x 1 CPU | {len(ray)} | {found['ray_wall_s']} | {found['ray_sweep_s']} | {found['ray_training_s']} |

Overhead per run: {found['overhead_per_run_s']} s ((ray - local) time to verdicts.json x 2 / runs); the cluster's start,
{found['cluster_start_s']} s, is not in the ray figures. Same verdicts.json (throughput aside): {'yes' if same else 'NO'}.
Load average at the start: {load_local} (local), {load_ray} (ray); each launcher prepared its data in a cache of its own.
"""
(out / "ray_vs_local.md").write_text(table)
print(table)
EOF
