"""How long `blocklab` takes to answer before it does any work: `--help`, a subcommand's `--help` and an
argument error, each in a fresh process, N times.

    python benchmarks/startup.py [--n 7] [--python .venv/bin/python] [--src DIR]

Prints, per command, the median wall time, the CPU time (user + system) per run and the peak RSS of the
child processes. Each command runs in its own `python -m blocklab` process (what the `blocklab` script
does, without depending on where it is installed); the peak RSS is the largest of the runs
(resource.getrusage(RUSAGE_CHILDREN) only grows, so each command is measured in a fresh helper process of
its own). CPU time is the figure to compare on a shared machine: wall time grows with the load.
--src DIR puts another source tree first on PYTHONPATH (e.g. `git archive HEAD src | tar -x -C /tmp/old`
then --src /tmp/old/src), to measure an older version beside the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# A run directory the argument errors name: the config is refused before anything is written, so it never exists.
_OUT = os.path.join(tempfile.gettempdir(), "blocklab-startup-never-written")

COMMANDS = {
    "blocklab --help": ["--help"],
    "blocklab train --help": ["train", "--help"],
    "blocklab train (no --out: argument error)": ["train", "--model.block", "sas-p"],
    "blocklab train --model.block nosuch --out DIR": ["train", "--model.block", "nosuch", "--out", _OUT],
    "blocklab train --model.norm nosuch --out DIR": ["train", "--model.norm", "nosuch", "--out", _OUT],
    "blocklab compare --preset nope --list": ["compare", "--preset", "nope", "--list"],
}

# Runs one command n times and reports wall times and the children's peak RSS: a process of its own, so
# that RUSAGE_CHILDREN's high-water mark belongs to this command alone.
_MEASURE = """
import json, os, resource, subprocess, sys, time
python, n, argv = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
times, codes = [], set()
for _ in range(n):
    t0 = time.perf_counter()
    r = subprocess.run([python, "-m", "blocklab", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times.append(time.perf_counter() - t0)
    codes.add(r.returncode)
use = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (use.ru_utime + use.ru_stime) / n
print(json.dumps({"times": times, "cpu_s": cpu, "rss_mib": use.ru_maxrss / 1024, "codes": sorted(codes)}))
"""


def measure(python: str, argv: list[str], n: int, src: str | None) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, python, str(n), json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=7, help="fresh processes per command (default: 7)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that has blocklab installed")
    ap.add_argument("--src", help="a source tree (the folder holding blocklab/) to put first on PYTHONPATH")
    args = ap.parse_args()
    print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'command':45} {'median s':>9} {'min s':>7} {'CPU s':>6} {'peak RSS MiB':>13} {'exit':>5}")
    for label, argv in COMMANDS.items():
        r = measure(args.python, argv, args.n, args.src)
        codes = ",".join(map(str, r["codes"]))
        print(
            f"{label:45} {statistics.median(r['times']):9.2f} {min(r['times']):7.2f} {r['cpu_s']:6.2f} "
            f"{r['rss_mib']:13.0f} {codes:>5}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
