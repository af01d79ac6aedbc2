"""Regenerate every block of generated text in the repository's documents, from the files they state:

- docs/verdicts.md's list of claim rules, from the rules themselves (src/blocklab/experiments/claims);
- every `<!-- blocklab summary: PATH -->` ... `<!-- end of blocklab summary -->` block of README.md and of
  results/*/README.md, from PATH (a verdicts.json, relative to the document) through `blocklab report --summary`'s
  markdown.

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


def rules_markdown() -> str:
    from blocklab.experiments.claims import RULES

    return "".join(f"- {r.paper} ({r.key}): {r.statement}\n" for r in RULES)


def summary_of(document: Path, path: str) -> str:
    from blocklab.reporting.summary import summary_markdown

    verdicts = json.loads((document.parent / path).read_text())
    return summary_markdown(verdicts, level="####")


def synced(document: Path, text: str) -> str:
    if RULES_BEGIN in text:
        start = text.index(RULES_BEGIN) + len(RULES_BEGIN)
        end = text.index(RULES_END, start)
        text = text[:start] + "\n" + rules_markdown() + text[end:]
    return SUMMARY.sub(lambda m: m.group(0).replace(m.group("body"), summary_of(document, m.group("path"))), text)


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
