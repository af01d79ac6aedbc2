"""Each test file's measured seconds (tests/durations.json), for the order `make test` hands files to its workers.

pytest-xdist's `--dist loadfile` gives each worker whole files, one after another; with xdist's default order
(files with the most tests first) the files of a few long tests (the torchrun runs, the CLI processes) came
last, and one worker ran the last of them while the other waited. tests/conftest.py orders the files by these
seconds instead, longest first (the longest-processing-time rule): the tail is then the shortest files. The
numbers set an order only, never a pass or a fail; a file missing from them runs after the measured ones.

Refresh after the suite changes much (from the repository root):

    .venv/bin/python -m pytest -n 2 --dist loadfile --durations=0 --durations-min=0 -q > /tmp/durations.log
    .venv/bin/python -m tests.durations /tmp/durations.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
_LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+([^:\s]+)::")


def file_seconds(log: str) -> dict[str, float]:
    """{test file: its setup, call and teardown seconds summed} from pytest's --durations report."""
    total: Counter = Counter()
    for line in log.splitlines():
        if m := _LINE.match(line):
            total[m.group(2)] += float(m.group(1))
    return {f: round(s, 1) for f, s in sorted(total.items(), key=lambda kv: -kv[1])}


def load() -> dict[str, float]:
    """The stored seconds; {} where the file is missing or unreadable (the order then is xdist's own)."""
    try:
        data = json.loads(FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """Indices of `nodeids` with their files in decreasing measured seconds (unmeasured last), each file's tests
    in their own order: a stable sort by file."""
    return sorted(range(len(nodeids)), key=lambda i: -seconds.get(nodeids[i].split("::", 1)[0], 0.0))


if __name__ == "__main__":
    measured = file_seconds(Path(sys.argv[1]).read_text())
    if not measured:
        sys.exit(f"no --durations lines in {sys.argv[1]}")
    FILE.write_text(json.dumps(measured, indent=0) + "\n")
    print(f"{len(measured)} files, {sum(measured.values()):.0f} s in all, written to {FILE}")
