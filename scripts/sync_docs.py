"""Regenerate every block of generated text in the repository's documents, from the files they state:

- docs/verdicts.md's list of claim rules, from the rules themselves (src/blocklab/experiments/claims);
- every `<!-- blocklab summary: PATH -->` ... `<!-- end of blocklab summary -->` block of README.md and of
  results/*/README.md, from PATH (a verdicts.json, relative to the document) through `blocklab report --summary`'s
  markdown;
- every `<!-- blocklab stability: PATH -->` ... `<!-- end of blocklab stability -->` block, from PATH (the
  stability.json of benchmarks/claim_stability.py, relative to the document): each claim's status at each seed
  set, read from that set's verdicts.json.

    python scripts/sync_docs.py          # rewrite the blocks
    python scripts/sync_docs.py --check  # exit 1 naming the stale blocks (tests/test_docs.py runs this check)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES_BEGIN = "<!-- rules: generated from src/blocklab/experiments/claims; tests/test_docs.py keeps them equal -->"
RULES_END = "<!-- end of rules -->"
SUMMARY = re.compile(r"<!-- blocklab summary: (?P<path>[^ ]+) -->\n(?P<body>.*?)<!-- end of blocklab summary -->", re.S)
STABILITY = re.compile(
    r"<!-- blocklab stability: (?P<path>[^ ]+) -->\n(?P<body>.*?)<!-- end of blocklab stability -->", re.S
)


def rules_markdown() -> str:
    from blocklab.experiments.claims import RULES

    return "".join(f"- {r.paper} ({r.key}): {r.statement}\n" for r in RULES)


def summary_of(document: Path, path: str) -> str:
    from blocklab.reporting.summary import summary_markdown

    verdicts = json.loads((document.parent / path).read_text())
    return summary_markdown(verdicts, level="####")


def stability_of(document: Path, path: str) -> str:
    """Each claim's status at each seed set (from the sets' own verdicts.json), and how often each was decided."""
    found = json.loads((document.parent / path).read_text())
    root = (document.parent / path).parent
    sets = []
    for s in found["sets"]:
        verdicts = json.loads((root / s["verdicts"]).read_text())
        sets.append((s["seeds"], {(c["paper"], c["claim"], c["experiment"]): c["status"] for c in verdicts["claims"]}))
    keys = list(dict.fromkeys(k for _, claims in sets for k in claims))
    head = (
        ["claim"] + [f"seeds {seeds[0]}-{seeds[-1]}" for seeds, _ in sets] + ["holds", "does not hold", "inconclusive"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    said_both = []
    for key in keys:
        statuses = [claims.get(key, "—") for _, claims in sets]
        counts = [sum(st == w for st in statuses) for w in ("holds", "does not hold", "inconclusive")]
        if counts[0] and counts[1]:
            said_both.append(key[1])
        lines.append("| " + " | ".join([f"{key[0]}: {key[1]} ({key[2]})", *statuses, *map(str, counts)]) + " |")
    tuning = ", ".join(map(str, found.get("tuning_seeds") or []))
    lines += [
        "",
        f"{len(sets)} disjoint sets of final seeds, the tuning (seeds {tuning}) shared. "
        + (
            f"Said both `holds` and `does not hold`: {'; '.join(said_both)}."
            if said_both
            else "No claim `holds` at one set and `does not hold` at another."
        ),
    ]
    return "\n".join(lines) + "\n"


def synced(document: Path, text: str) -> str:
    if RULES_BEGIN in text:
        start = text.index(RULES_BEGIN) + len(RULES_BEGIN)
        end = text.index(RULES_END, start)
        text = text[:start] + "\n" + rules_markdown() + text[end:]
    text = SUMMARY.sub(
        lambda m: (
            f"<!-- blocklab summary: {m['path']} -->\n{summary_of(document, m['path'])}<!-- end of blocklab summary -->"
        ),
        text,
    )
    return STABILITY.sub(
        lambda m: (
            f"<!-- blocklab stability: {m['path']} -->\n{stability_of(document, m['path'])}"
            "<!-- end of blocklab stability -->"
        ),
        text,
    )


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "docs" / "verdicts.md", *sorted((ROOT / "results").glob("*/README.md"))]


def main(argv: list[str]) -> int:
    stale = []
    for doc in documents():
        text = doc.read_text()
        new = synced(doc, text)
        if new != text:
            stale.append(doc.relative_to(ROOT).as_posix())
            if "--check" not in argv:
                doc.write_text(new)
    if stale and "--check" in argv:
        print(f"generated text out of date in {', '.join(stale)}: run python scripts/sync_docs.py", file=sys.stderr)
        return 1
    for name in stale:
        print(f"updated {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
