"""data/glue.py: GLUE-layout data from .tsv / .jsonl files, GLUE's folder layout and `datasets`
(save_to_disk folders written here), and every bad input as one clear UserError.

Nothing reaches the hub: `datasets`' cache is redirected into tmp and the hub test runs offline."""

import json

import pytest

from blocklab.data.documents import unit_hash
from blocklab.data.examples import Example
from blocklab.data.glue import GLUE_TASKS, glue_task, load_glue_layout
from blocklab.errors import UserError

datasets = pytest.importorskip("datasets")

QUIET = dict(log=lambda *a: None)
N = 40  # rows per table: enough for both sides of a 10% hash cut


@pytest.fixture(autouse=True)
def _hf_cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


def tsv(path, header, rows):
    path.write_text("\n".join(["\t".join(header)] + ["\t".join(map(str, r)) for r in rows]) + "\n")
    return path


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def load(source, **kw):
    return load_glue_layout(str(source), **QUIET, **kw)


def error(source, **kw) -> str:
    with pytest.raises(UserError) as e:
        load(source, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_tsv_single_text_is_cut_by_the_hash_of_the_row(tmp_path):
    path = tsv(tmp_path / "reviews.tsv", ["sentence", "label"], [(f"text {i}", i % 2) for i in range(N)])
    lines = []
    data = load_glue_layout(str(path), log=lines.append)
    assert (data.name, data.metric, data.label_names, data.n_labels) == ("reviews", "accuracy", ["0", "1"], 2)
    want_val = [i for i in range(N) if unit_hash(f"row {i}") < 0.1]
    assert want_val and [e.doc for e in data.val] == [f"row {i}" for i in want_val]
    assert len(data.train) + len(data.val) == N
    first = data.train[0] if data.train[0].doc == "row 0" else data.val[0]
    assert (first.text, first.label, first.text_pair, first.doc) == ("text 0", 0, None, "row 0")
    assert data.info["train"] == len(data.train) and data.info["label_counts"]["train"]["1"] > 0
    assert 0 <= data.info["majority_accuracy"] <= 100
    assert len(lines) == 1 and "majority-class baseline on validation: accuracy" in lines[0]
    assert [e.doc for e in load(path).val] == [e.doc for e in data.val]  # deterministic


def test_glue_folder_with_pairs_and_the_task_from_the_folder_name(tmp_path):
    folder = tmp_path / "MRPC"
    folder.mkdir()
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]  # gluebenchmark.com's own TSV columns
    tsv(folder / "train.tsv", header, [(i % 2, i, i, f"a {i}", f"b {i}") for i in range(N)])
    tsv(folder / "dev.tsv", header, [(1, 0, 0, "x", "y"), (0, 0, 0, "z", "w")])
    data = load(folder)
    assert (data.name, data.metric, len(data.train), len(data.val)) == ("mrpc", "f1_accuracy", N, 2)
    assert data.val[0] == Example("x", 1, "y", "row 0")
    assert data.info["baseline"].keys() == {"f1", "accuracy", "score"}


def test_tsv_pair_and_metric_override(tmp_path):
    path = tsv(
        tmp_path / "rte_sample.tsv",
        ["index", "sentence1", "sentence2", "label"],
        [(i, f"p {i}", f"h {i}", ["entailment", "not_entailment"][i % 2]) for i in range(N)],
    )
    data = load(path)
    assert (data.name, data.metric, data.label_names) == ("rte", "accuracy", ["entailment", "not_entailment"])
    assert all(e.text_pair == "h" + e.text[1:] for e in data.train + data.val)
    assert load(path, metric="matthews").metric == "matthews"


def test_jsonl_with_string_labels_mapped_to_sorted_names(tmp_path):
    labels = ["positive", "negative", "neutral"]
    path = jsonl(tmp_path / "sentiment.jsonl", [{"sentence": f"s {i}", "label": labels[i % 3]} for i in range(N)])
    data = load(path)
    assert data.label_names == ["negative", "neutral", "positive"]
    for e in data.train + data.val:
        i = int(e.doc.split()[1])
        assert e.text == f"s {i}" and data.label_names[e.label] == labels[i % 3]


def test_folder_of_jsonl_train_and_validation(tmp_path):
    jsonl(tmp_path / "train.jsonl", [{"premise": f"p{i}", "hypothesis": f"h{i}", "label": i % 3} for i in range(N)])
    jsonl(tmp_path / "validation.jsonl", [{"premise": "p", "hypothesis": "h", "label": 2}])
    data = load(tmp_path)
    assert (len(data.train), len(data.val), data.label_names) == (N, 1, ["0", "1", "2"])
    assert data.val[0].text_pair == "h" and data.info["split"] == "the source's own splits"


def test_float_labels_are_a_regression(tmp_path):
    path = tsv(
        tmp_path / "similar.tsv",
        ["sentence1", "sentence2", "label"],
        [(f"a{i}", f"b{i}", f"{i % 5 + 0.25}") for i in range(N)],
    )
    data = load(path)
    assert (data.label_names, data.n_labels, data.metric) == (None, 1, "pearson_spearman")
    assert all(isinstance(e.label, float) for e in data.train)
    assert data.info["baseline"]["score"] == 0.0  # a constant guess has no correlation
    # STS-B is a regression even when its scores happen to be whole numbers
    stsb = tsv(
        tmp_path / "stsb.tsv", ["sentence1", "sentence2", "score"], [(f"a{i}", f"b{i}", i % 5) for i in range(N)]
    )
    assert load(stsb).label_names is None and load(stsb).train[0].label in (0.0, 1.0, 2.0, 3.0, 4.0)
    assert "does not fit regression labels" in error(path, metric="accuracy")


def test_hf_save_to_disk_with_classlabel_names(tmp_path):
    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "idx": datasets.Value("int32"),
            "label": datasets.ClassLabel(names=["unacceptable", "acceptable"]),
        }
    )

    def split(n, label):
        return datasets.Dataset.from_dict(
            {"sentence": [f"s{i}" for i in range(n)], "idx": list(range(n)), "label": [label(i) for i in range(n)]},
            features=features,
        )

    dd = datasets.DatasetDict(
        {"train": split(N, lambda i: i % 2), "validation": split(4, lambda i: 1), "test": split(3, lambda i: -1)}
    )  # GLUE's hidden test labels: never read
    dd.save_to_disk(str(tmp_path / "saved"))
    data = load(f"hf:{tmp_path / 'saved'}", hf_config="cola", cache_dir=str(tmp_path / "cache"))
    assert (data.name, data.metric, data.label_names) == ("cola", "matthews", ["unacceptable", "acceptable"])
    assert (len(data.train), len(data.val), data.val[0].label, data.val[0].doc) == (N, 4, 1, "row 0")
    assert data.info["label_counts"]["val"] == {"acceptable": 4}


def test_hf_mnli_columns_validation_matched_and_a_single_saved_dataset(tmp_path):
    rows = {
        "premise": [f"p{i}" for i in range(N)],
        "hypothesis": [f"h{i}" for i in range(N)],
        "label": [i % 3 for i in range(N)],
    }
    ds = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": ds, "validation_matched": ds.select(range(5))}).save_to_disk(str(tmp_path / "mnli"))
    data = load(f"hf:{tmp_path / 'mnli'}")
    assert (data.name, data.n_labels, len(data.val), data.val[1].text_pair) == ("mnli", 3, 5, "h1")
    ds.save_to_disk(str(tmp_path / "one"))  # no validation split: cut by hash, like a file
    one = load(f"hf:{tmp_path / 'one'}")
    assert len(one.train) + len(one.val) == N and one.val
    floats = datasets.Dataset.from_dict({"sentence": ["a", "b", "c"] * 10, "label": [0.5, 1.0, 2.0] * 10})
    floats.save_to_disk(str(tmp_path / "floats"))
    assert load(f"hf:{tmp_path / 'floats'}").label_names is None


def test_hf_unreachable_hub_name_is_one_line(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    msg = error("hf:blocklab-test/no-such-dataset", hf_config="mrpc", cache_dir=str(tmp_path / "cache"))
    assert msg.startswith("data source hf:blocklab-test/no-such-dataset: cannot load it from the Hugging Face hub")


def test_hf_test_split_labels(tmp_path):
    ds = datasets.Dataset.from_dict({"sentence": ["a", "b", "c"], "label": [-1, -1, -1]})
    datasets.DatasetDict({"train": ds, "validation": ds}).save_to_disk(str(tmp_path / "test_only"))
    msg = error(f"hf:{tmp_path / 'test_only'}")
    assert "split 'train': every label is -1, as in GLUE's test split" in msg
    datasets.DatasetDict({"train": ds, "validation": ds.select([])}).save_to_disk(str(tmp_path / "no_val"))
    assert error(f"hf:{tmp_path / 'no_val'}") == f"data source hf:{tmp_path / 'no_val'}: split 'validation' is empty"
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "no_train"))
    assert error(f"hf:{tmp_path / 'no_train'}") == f"data source hf:{tmp_path / 'no_train'} has no 'train' split"


def test_bad_inputs_are_one_clear_line(tmp_path):
    no_label = tsv(tmp_path / "a.tsv", ["sentence", "stars"], [("x", 1), ("y", 2)])
    assert error(no_label) == (
        f"{no_label}: dataset without labels: no 'label' column (columns found: 'sentence', 'stars')"
    )
    no_text = tsv(tmp_path / "b.tsv", ["review", "label"], [("x", 1), ("y", 0)])
    msg = error(no_text)
    assert "no text columns: expected 'sentence'" in msg and "columns found: 'review', 'label'" in msg
    bad_row = tmp_path / "c.tsv"
    bad_row.write_text("sentence\tlabel\nfine\t1\nno label here\n")
    assert error(bad_row) == f"{bad_row} line 3: expected 2 tab-separated fields as in the header, found 1"
    (tmp_path / "empty.tsv").write_text("")
    assert error(tmp_path / "empty.tsv") == f"data file {tmp_path / 'empty.tsv'} is empty"
    (tmp_path / "empty.jsonl").write_text("\n")
    assert error(tmp_path / "empty.jsonl") == f"data file {tmp_path / 'empty.jsonl'} is empty"
    assert "has a header but no rows" in error(tsv(tmp_path / "d.tsv", ["sentence", "label"], []))
    assert error(tmp_path / "missing.tsv").startswith(f"data source '{tmp_path / 'missing.tsv'}' does not exist")
    assert error(f"hf:{tmp_path / 'missing'}").startswith(f"data source hf:{tmp_path / 'missing'} does not exist")
    (tmp_path / "x.csv").write_text("a,b\n")
    assert "must end in .tsv" in error(tmp_path / "x.csv")
    one_class = tsv(tmp_path / "e.tsv", ["sentence", "label"], [(f"s{i}", 1) for i in range(N)])
    assert "every training label is 1: a classifier needs two classes" in error(one_class)
    unreadable = tmp_path / "f.tsv"
    unreadable.write_bytes(b"sentence\tlabel\n\xff\t1\n")
    assert error(unreadable) == f"{unreadable} line 2: not valid UTF-8"
    assert "unknown metric 'auc'" in error(no_label, metric="auc")


def test_unknown_validation_label_and_missing_columns_in_a_split(tmp_path):
    tsv(tmp_path / "train.tsv", ["sentence", "label"], [("a", "good"), ("b", "bad")])
    tsv(tmp_path / "dev.tsv", ["sentence", "label"], [("c", "good"), ("d", "ugly")])
    assert error(tmp_path) == (
        f"{tmp_path / 'dev.tsv'} line 3: unknown label 'ugly': the training split has "
        "no such label (training labels: bad, good)"
    )
    tsv(tmp_path / "dev.tsv", ["text_a", "label"], [("c", "good")])
    assert error(tmp_path).startswith(f"{tmp_path / 'dev.tsv'}: no text columns")
    rows = jsonl(tmp_path / "rows.jsonl", [{"sentence": "a", "label": 0}, {"label": 1}] * N)
    assert error(rows) == f"{rows} line 2: no text in column 'sentence'"
    jsonl(rows, [{"sentence": 7, "label": 0}, {"sentence": "b", "label": 1}] * N)
    assert error(rows) == f"{rows} line 1: column 'sentence' holds 7, not text"
    rows.write_text('{"sentence": "a", "label": 0}\n{"sentence": "b", "label": \n')
    assert error(rows).startswith(f"{rows} line 2: invalid JSON")
    ints = tmp_path / "ints"
    ints.mkdir()
    tsv(ints / "train.tsv", ["sentence", "label"], [("a", 0), ("b", 1)])
    tsv(ints / "dev.tsv", ["sentence", "label"], [("c", 2)])
    assert "unknown label 2: the training split has no such label (training labels: 0, 1)" in error(ints)
    (tmp_path / "nothing").mkdir()
    assert error(tmp_path / "nothing") == (
        f"folder {tmp_path / 'nothing'} has no train.tsv or train.jsonl (GLUE's layout: train.tsv and dev.tsv)"
    )


def test_task_table_and_names():
    assert {t: GLUE_TASKS[t].metric for t in ("cola", "mrpc", "qqp", "stsb", "sst2")} == {
        "cola": "matthews",
        "mrpc": "f1_accuracy",
        "qqp": "f1_accuracy",
        "stsb": "pearson_spearman",
        "sst2": "accuracy",
    }
    assert all(GLUE_TASKS[t].metric == "accuracy" for t in ("mnli", "qnli", "rte", "wnli"))
    assert glue_task("SST-2").name == "sst2" and glue_task("STS-B").name == "stsb"
    assert glue_task("mrpc_train").name == "mrpc" and glue_task("glue") is None and glue_task(None) is None
