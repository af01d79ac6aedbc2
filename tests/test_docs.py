"""The repository's documents state results and rules only through generated text: every such block is equal to
what scripts/sync_docs.py generates from the files it names (verdicts.json, the claim rules)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_generated_block_is_up_to_date():
    r = subprocess.run([sys.executable, "scripts/sync_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_verdict_rules_document_lists_every_claim_rule():
    from blocklab.experiments.claims import RULES

    text = (ROOT / "docs" / "verdicts.md").read_text()
    for rule in RULES:
        assert f"({rule.key}): {rule.statement}" in text
