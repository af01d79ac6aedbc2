"""Reading corpora, the split, and every bad input of the data source."""

import json

import pytest

from blocklab.data import DataConfig, prepare
from blocklab.data.sources import Document, load_corpus, split_documents
from blocklab.errors import UserError


@pytest.fixture(scope="module")
def stdlib_corpus():
    return load_corpus(DataConfig(), log=lambda *a: None)


def test_stdlib_leaves_out_tests_and_site_packages(stdlib_corpus):
    names = [d.name for d in stdlib_corpus.docs]
    assert stdlib_corpus.kind == "stdlib" and len(names) > 300
    assert all(n.endswith(".py") for n in names)
    excluded = {"test", "tests", "idle_test", "site-packages"}
    assert not [n for n in names if excluded & set(n.split("/")[:-1])]
    for must in ("os.py", "json/decoder.py", "collections/__init__.py"):
        assert must in names
    assert names == sorted(names)  # listing order must not depend on the file system


def test_stdlib_split_is_deterministic_about_two_percent_and_by_file(stdlib_corpus):
    docs = stdlib_corpus.docs
    train, val = split_documents(docs, 0.02)
    assert 0.005 < len(val) / len(docs) < 0.05
    assert {d.name for d in train}.isdisjoint({d.name for d in val})
    assert len(train) + len(val) == len(docs)
    # same split again, and from a shuffled listing
    train2, val2 = split_documents(list(reversed(docs)), 0.02)
    assert {d.name for d in val2} == {d.name for d in val}


def test_split_membership_depends_only_on_the_document_name():
    docs = [Document(f"f{i}.py", "x") for i in range(400)]
    _, val = split_documents(docs, 0.1)
    _, val_more = split_documents(docs + [Document(f"g{i}.py", "x") for i in range(100)], 0.1)
    assert {d.name for d in val} == {d.name for d in val_more if d.name.startswith("f")}


@pytest.mark.parametrize("n, frac", [(2, 0.02), (3, 0.02), (2, 0.99), (5, 0.9)])
def test_split_keeps_a_document_on_each_side(n, frac):
    train, val = split_documents([Document(f"d{i}", "text") for i in range(n)], frac)
    assert len(train) >= 1 and len(val) >= 1 and len(train) + len(val) == n


def test_single_document_is_cut_at_a_line_start():
    text = "".join(f"line {i}\n" for i in range(100))
    train, val = split_documents([Document("a.txt", text)], 0.1)
    assert train[0].text + val[0].text == text
    assert val[0].text.startswith("line ") and 0.05 < len(val[0].text) / len(text) < 0.2
    one_line = "x" * 50
    train, val = split_documents([Document("b.txt", one_line)], 0.1)
    assert train[0].text + val[0].text == one_line and val[0].text


def test_folder_glob_selects_files(tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "src" / "b.py").write_text("b = 2\n")
    (tmp_path / "README.md").write_text("# readme\n")
    got = load_corpus(DataConfig(source=str(tmp_path), glob="src/**/*.py"))
    assert [d.name for d in got.docs] == ["src/b.py", "src/pkg/a.py"]
    everything = load_corpus(DataConfig(source=str(tmp_path)))
    assert [d.name for d in everything.docs] == ["README.md", "src/b.py", "src/pkg/a.py"]


def test_folder_skips_non_text_files_with_one_warning(tmp_path, logs):
    (tmp_path / "good.py").write_text("print('ok')\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # hidden: not corpus
    got = load_corpus(DataConfig(source=str(tmp_path)), log=logs)
    assert [d.name for d in got.docs] == ["good.py"] and got.skipped == 2
    assert len(logs.lines) == 1 and "skipped 2 file" in logs.lines[0]  # one line, with the count


def test_text_file_and_jsonl(tmp_path):
    f = tmp_path / "book.txt"
    f.write_text("It was a dark night.\n")
    got = load_corpus(DataConfig(source=str(f)))
    assert got.kind == "file" and [d.text for d in got.docs] == ["It was a dark night.\n"]
    j = tmp_path / "data.jsonl"
    j.write_text(json.dumps({"text": "first"}) + "\n\n" + json.dumps({"text": "é\nsecond", "id": 3}) + "\n")
    got = load_corpus(DataConfig(source=str(j)))
    assert got.kind == "jsonl" and [d.text for d in got.docs] == ["first", "é\nsecond"]


# --- bad input: one line, a UserError, nothing in the cache ------------------------------


def _bad_inputs(tmp_path):
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "bin_dir").mkdir()
    (tmp_path / "bin_dir" / "blob.bin").write_bytes(bytes(range(256)))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.py").write_text("x = 1\n")
    (tmp_path / "no_text.jsonl").write_text('{"text": "ok"}\n{"body": "no text here"}\n')
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": "ok"}\n{"text": broken\n')
    (tmp_path / "num.jsonl").write_text('{"text": 5}\n')
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02")
    return {
        "missing path": (dict(source=str(tmp_path / "nope")), "does not exist"),
        "empty folder": (dict(source=str(tmp_path / "empty_dir")), "has no files"),
        "only binary files": (dict(source=str(tmp_path / "bin_dir")), "no non-empty UTF-8 text"),
        "glob matches nothing": (dict(source=str(tmp_path / "code"), glob="**/*.rs"), "matches no files"),
        "glob on stdlib": (dict(source="stdlib", glob="*.py"), "folder source"),
        "json line without text": (dict(source=str(tmp_path / "no_text.jsonl")), "line 2"),
        "invalid json": (dict(source=str(tmp_path / "bad.jsonl")), "line 3: invalid JSON"),
        "text not a string": (dict(source=str(tmp_path / "num.jsonl")), "line 1"),
        "empty text file": (dict(source=str(tmp_path / "empty.txt")), "empty"),
        "binary text file": (dict(source=str(tmp_path / "binary.txt")), "not UTF-8"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing path",
        "empty folder",
        "only binary files",
        "glob matches nothing",
        "glob on stdlib",
        "json line without text",
        "invalid json",
        "text not a string",
        "empty text file",
        "binary text file",
    ],
)
def test_bad_input_is_one_line_user_error_and_leaves_no_cache(tmp_path, case):
    kwargs, expect = _bad_inputs(tmp_path)[case]
    cache = tmp_path / "cache"
    with pytest.raises(UserError) as info:
        prepare(DataConfig(cache_dir=str(cache), **kwargs), log=lambda *a: None)
    msg = str(info.value)
    assert expect in msg and "\n" not in msg
    assert not cache.exists() or not any(cache.iterdir())
