"""The repository's documents state results and rules only through generated text: every such block is equal to
what scripts/sync_docs.py generates from the files it names (verdicts.json, the claim rules).

docs/ stays in step with the code: the block catalogue has one entry per registered block and option and none
for anything else, the index links every page, no page and no module of src/ leans on the outside specification, and
every file, test, page and heading a document or the code names exists."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_generated_block_is_up_to_date(capsys):
    # The script's own main, in this process: a fresh interpreter would spend its time importing torch again.
    spec = importlib.util.spec_from_file_location("sync_docs", ROOT / "scripts" / "sync_docs.py")
    sync_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync_docs)
    assert sync_docs.main(["--check"]) == 0, capsys.readouterr().err


def test_the_verdict_rules_document_lists_every_claim_rule():
    from blocklab.experiments.claims import RULES

    text = (ROOT / "docs" / "verdicts.md").read_text()
    for rule in RULES:
        assert f"({rule.key}): {rule.statement}" in text


# ----------------------------------------------------------------------------------------- docs/ in step with the code

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# A path a page names, and a test in it: `tests/blocks/test_admin.py::test_omegas_are_the_running_ratio_by_hand`.
NAMED_PATH = re.compile(r"\b((?:src/blocklab|tests|benchmarks|scripts)/[\w/.-]*\w\.(?:py|md|toml|json|sh))(?:::(\w+))?")
DOC_POINTER = re.compile(r"\bdocs/([\w-]+\.md)(?:#([\w-]+))?")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def entries() -> dict[str, str]:
    """docs/blocks.md's entries: {heading: its text up to the next heading of its level or above}."""
    text = (DOCS / "blocks.md").read_text()
    parts = re.split(r"^(#{1,3} .+)$", text, flags=re.M)
    out: dict[str, str] = {}
    for heading, body in zip(parts[1::2], parts[2::2]):
        if heading.startswith("### "):
            name = heading[4:].strip()
            assert name not in out, f"docs/blocks.md has two entries for {name!r}"
            out[name] = body
    return out


def test_the_catalogue_has_one_entry_per_block_and_option_and_names_nothing_else():
    from blocklab.registry import OPTIONS, REGISTRY

    wanted = set(REGISTRY) | set(OPTIONS) | {"canon"}
    found = set(entries())
    assert not wanted - found, f"docs/blocks.md has no entry (### NAME) for: {sorted(wanted - found)}"
    assert not found - wanted, f"docs/blocks.md has entries for no registered block or option: {sorted(found - wanted)}"


def test_each_block_entry_gives_its_label():
    from blocklab.registry import REGISTRY

    for name, body in entries().items():
        if name in REGISTRY:
            assert f"**{REGISTRY[name].label}**" in body, f"docs/blocks.md#{name} does not give the label"


def test_the_docs_index_links_every_page():
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in PAGES} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not link: {sorted(pages - linked)}"
    assert linked <= pages, f"docs/README.md links pages that do not exist: {sorted(linked - pages)}"


def test_no_docs_page_cites_the_outside_specification():
    for page in PAGES:
        assert "SPEC" not in page.read_text(), f"{page.relative_to(ROOT)} mentions SPEC: say it in the docs' own words"


def test_no_module_of_src_cites_the_outside_specification():
    """The code cites docs/ (docs/models.md, docs/blocks.md#NAME, ...), never a file outside the repository."""
    word = re.compile(r"\bSPEC\b")  # SPEC, SPEC.md; not SPECIAL_TOKENS
    found = [
        f"{source.relative_to(ROOT)}:{n}"
        for source in sorted((ROOT / "src").rglob("*"))
        if source.is_file() and source.suffix in {".py", ".toml", ".md", ".txt", ".json"}
        for n, line in enumerate(source.read_text().splitlines(), 1)
        if word.search(line)
    ]
    assert not found, f"these lines mention SPEC; cite the page of docs/ that says it: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_test_and_page_a_docs_page_names_exists(page):
    text = page.read_text()
    for path, test in NAMED_PATH.findall(text):
        assert (ROOT / path).is_file(), f"{page.name} names {path}, which does not exist"
        if test:
            assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), flags=re.M), (
                f"{page.name}: no {path}::{test}"
            )
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in link:
            assert (page.parent / link).exists(), f"{page.name} links {link}, which does not exist"


def test_every_pointer_into_docs_names_a_page_and_a_heading():
    """The code cites docs/ (a block's docstring: docs/blocks.md#NAME); each such pointer must land."""
    sources = [ROOT / "README.md", *sorted((ROOT / "src").rglob("*.py"))]
    for source in sources:
        for page, anchor in DOC_POINTER.findall(source.read_text()):
            assert (DOCS / page).is_file(), f"{source.relative_to(ROOT)} cites docs/{page}, which does not exist"
            if anchor:
                assert anchor in anchors((DOCS / page).read_text()), (
                    f"{source.relative_to(ROOT)}: no docs/{page}#{anchor}"
                )
