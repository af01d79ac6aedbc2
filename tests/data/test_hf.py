"""source = "hf:...": local datasets through the `datasets` library, and its bad inputs.

Nothing here reaches the hub: the datasets are written locally (save_to_disk, parquet,
JSON lines) and `datasets`' own cache is redirected into tmp.
"""

import json

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from blocklab.data import DataConfig, prepare  # noqa: E402
from blocklab.data.documents import SplitRule  # noqa: E402
from blocklab.data.sources import stdlib_root  # noqa: E402
from blocklab.errors import UserError  # noqa: E402

from .conftest import SAMPLE_FILES  # noqa: E402

QUIET = dict(log=lambda *a: None)


@pytest.fixture(autouse=True)
def _hf_cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.fixture(scope="module")
def rows():
    """Real code as rows, plus an empty and a None row (skipped, not documents)."""
    texts = [
        (stdlib_root() / rel).read_text(encoding="utf-8") for rel in SAMPLE_FILES if (stdlib_root() / rel).is_file()
    ]
    contents = texts[:10] + [""] + texts[10:] + [None]
    return {"content": contents, "stars": list(range(len(contents))), "repo": ["r"] * len(contents)}


@pytest.fixture
def local_sets(tmp_path, rows):
    ds = datasets.Dataset.from_dict(rows)
    ds.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": ds, "validation": ds.select(range(5))}).save_to_disk(str(tmp_path / "dict"))
    ds.to_parquet(str(tmp_path / "code.parquet"))
    ds.to_json(str(tmp_path / "code.jsonl"))  # JSON lines
    return tmp_path


def _cfg(tmp_path, source, **kw):
    return DataConfig(
        source=source, vocab_size=300, cache_dir=str(tmp_path / "cache"), **{"text_field": "content", **kw}
    )


@pytest.mark.slow
def test_save_to_disk_parquet_and_jsonl_give_the_same_corpus(local_sets, rows):
    tmp = local_sets
    got = {name: prepare(_cfg(tmp, f"hf:{tmp / name}"), **QUIET) for name in ("saved", "code.parquet", "code.jsonl")}
    ref = got["saved"]
    for c in got.values():  # same rows, same split, same tokenizer: identical arrays
        assert np.array_equal(np.asarray(c.train), np.asarray(ref.train))
        assert np.array_equal(np.asarray(c.val_doc_starts), np.asarray(ref.val_doc_starts))
        assert c.tokenizer.to_str() == ref.tokenizer.to_str()
    assert len({c.stats["cache_dir"] for c in got.values()}) == 3  # keyed by each file's own content
    # every non-empty row is one document, in row order, split by the hash of its row number
    texts = rows["content"]
    rule = SplitRule(0.02, (f"row {i}" for i in range(len(texts))))
    want = {
        p: [t for i, t in enumerate(texts) if t and rule.is_val(f"row {i}") == (p == "val")] for p in ("train", "val")
    }
    assert len(want["train"]) >= 1 and len(want["val"]) >= 1
    for part, arr, starts in (("train", ref.train, ref.train_doc_starts), ("val", ref.val, ref.val_doc_starts)):
        ends = np.append(starts[1:], len(arr)) - 1
        assert [ref.decode(arr[a:b]) for a, b in zip(starts, ends)] == want[part]
    assert ref.stats["files"] == len(texts) - 2 and ref.stats["tokens_train"] == len(ref.train)


def test_second_run_is_a_cache_hit_without_loading_again(local_sets):
    cfg = _cfg(local_sets, f"hf:{local_sets / 'code.parquet'}")
    first = prepare(cfg, **QUIET)
    again = prepare(cfg, **QUIET)
    assert first.stats["cache_hit"] is False and again.stats["cache_hit"] is True
    assert again.unigram_entropy == first.unigram_entropy


def test_dataset_dict_split_and_glob_of_data_files(local_sets, tmp_path):
    c = prepare(_cfg(tmp_path, f"hf:{local_sets / 'dict'}", split="validation"), **QUIET)
    assert c.stats["files"] == 5
    (tmp_path / "shards").mkdir()
    for i in range(3):
        lines = [json.dumps({"text": f"def shard_{i}_{j}(x):\n    return x * {j}\n"}) for j in range(20)]
        (tmp_path / "shards" / f"part-{i}.jsonl").write_text("\n".join(lines) + "\n")
    g = prepare(
        DataConfig(source=f"hf:{tmp_path / 'shards'}/*.jsonl", vocab_size=300, cache_dir=str(tmp_path / "cache")),
        **QUIET,
    )
    assert g.stats["files"] == 60


def _bad_inputs(tmp):
    datasets.Dataset.from_dict(
        {"content": []}, features=datasets.Features({"content": datasets.Value("string")})
    ).to_parquet(str(tmp / "empty.parquet"))
    datasets.Dataset.from_dict(
        {"content": []}, features=datasets.Features({"content": datasets.Value("string")})
    ).save_to_disk(str(tmp / "empty_saved"))
    datasets.Dataset.from_dict({"content": ["", None, ""]}).save_to_disk(str(tmp / "blank"))
    (tmp / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    (tmp / "notes.xml").write_text("<a/>")
    return {
        "unreachable hub name": (dict(source="hf:nosuch-org-blocklab/nosuch-dataset"), "cannot reach"),
        "unknown field": (dict(source=f"hf:{tmp / 'saved'}", text_field="body"), "no field 'body'"),
        "field not text": (dict(source=f"hf:{tmp / 'code.parquet'}", text_field="stars"), "not text"),
        "empty split": (dict(source=f"hf:{tmp / 'empty.parquet'}"), "split 'train' is empty"),
        "empty saved split": (dict(source=f"hf:{tmp / 'empty_saved'}"), "split 'train' is empty"),
        "only empty texts": (dict(source=f"hf:{tmp / 'blank'}"), "no training text"),
        "missing split": (dict(source=f"hf:{tmp / 'dict'}", split="test"), "no split 'test'"),
        "missing file": (dict(source=f"hf:{tmp / 'nope.parquet'}"), "does not exist"),
        "glob matches nothing": (dict(source=f"hf:{tmp}/*.csv"), "matches no files"),
        "unsupported file": (dict(source=f"hf:{tmp / 'notes.xml'}"), "expected data files"),
        "corrupt parquet": (dict(source=f"hf:{tmp / 'broken.parquet'}"), "cannot load it"),
        "no name": (dict(source="hf:"), "needs a dataset name"),
        "glob option": (dict(source=f"hf:{tmp / 'saved'}", glob="*.arrow"), "folder source"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unreachable hub name",
        "unknown field",
        "field not text",
        "empty split",
        "empty saved split",
        "only empty texts",
        "missing split",
        "missing file",
        "glob matches nothing",
        "unsupported file",
        "corrupt parquet",
        "no name",
        "glob option",
    ],
)
def test_bad_hf_input_is_one_line_user_error(local_sets, case):
    kwargs, expect = _bad_inputs(local_sets)[case]
    cache = local_sets / "cache"
    with pytest.raises(UserError) as info:
        prepare(DataConfig(cache_dir=str(cache), vocab_size=300, **{"text_field": "content", **kwargs}), **QUIET)
    msg = str(info.value)
    assert expect in msg and "\n" not in msg, msg
    assert not cache.exists() or not [p for p in cache.iterdir() if p.name.startswith(("corpus-", ".tmp-"))]


@pytest.mark.slow
def test_hub_name_reads_the_revision_the_hub_reports_and_streams(tmp_path, rows, monkeypatch):
    """The hub path with the network replaced: the hub's commit keys the cache and is the
    revision `datasets` loads; a streamed set (unknown length) splits by the plain rule."""
    import huggingface_hub

    revision = {"sha": "c0ffee"}
    monkeypatch.setattr(
        huggingface_hub.HfApi, "dataset_info", lambda self, name, **k: type("Info", (), {"sha": revision["sha"]})()
    )
    texts = [t for t in rows["content"] if t] * 3
    local = datasets.Dataset.from_dict({"content": texts})
    calls = []

    def fake_load(path, name=None, split=None, streaming=False, revision=None, **kw):
        calls.append((path, name, split, streaming, revision))
        return local.to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    cfg = DataConfig(
        source="hf:some-org/code",
        hf_config="python",
        split="train",
        streaming=True,
        text_field="content",
        val_fraction=0.2,
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    c = prepare(cfg, **QUIET)
    assert calls == [("some-org/code", "python", "train", True, "c0ffee")]
    assert c.stats["files_train"] + c.stats["files_val"] == len(texts) and c.stats["files_val"] >= 1
    assert prepare(cfg, **QUIET).stats["cache_hit"] is True and len(calls) == 1  # a hit loads nothing
    revision["sha"] = "beef00"  # a new commit on the hub: a new entry
    assert prepare(cfg, **QUIET).stats["cache_hit"] is False and calls[-1][-1] == "beef00"
    with pytest.raises(UserError, match="no field 'body'"):
        prepare(DataConfig(**{**cfg.__dict__, "text_field": "body"}), **QUIET)


def test_txt_is_one_document_per_paragraph_and_csv_by_column(tmp_path):
    paragraphs = [f"Paragraph {i} line one.\nParagraph {i} line two, with more words." for i in range(12)]
    (tmp_path / "prose.txt").write_text("\n\n".join(paragraphs) + "\n")
    c = prepare(
        DataConfig(source=f"hf:{tmp_path / 'prose.txt'}", vocab_size=300, cache_dir=str(tmp_path / "cache")), **QUIET
    )
    assert c.stats["files"] == 12
    ends = np.append(c.train_doc_starts[1:], len(c.train)) - 1
    assert all(c.decode(c.train[a:b]).strip() in paragraphs for a, b in zip(c.train_doc_starts, ends))
    (tmp_path / "table.csv").write_text("id,body\n" + "".join(f'{i},"row {i} says hello"\n' for i in range(30)))
    t = prepare(
        DataConfig(
            source=f"hf:{tmp_path / 'table.csv'}", text_field="body", vocab_size=300, cache_dir=str(tmp_path / "cache")
        ),
        **QUIET,
    )
    assert t.stats["files"] == 30
