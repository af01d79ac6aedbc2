"""GLUE-layout classification data for `blocklab finetune --task NAME`: one text or a text pair and
a label per row, read into `LabelledData` (data/examples.py).

Sources:
- `hf:NAME_OR_PATH`: a hub dataset (`hf:nyu-mll/glue` with hf_config "mrpc"), a `save_to_disk`
  folder, a folder of data files or one data file, through `datasets`. Its `train` split and its
  validation split (`validation`, MNLI's `validation_matched`, or `dev`) are read, never the test
  split (GLUE hides its labels as -1). A hub dataset in `datasets`' cache loads offline, as
  `datasets` itself does.
- a `.tsv` (header row) or `.jsonl` file, cut into train / validation by the hash of "row N" (10%,
  the corpora's SplitRule), so a row's side never depends on the rest of the file;
- a folder holding train.tsv or train.jsonl and dev / validation (.tsv or .jsonl): GLUE's layout.

Columns: `sentence` or `sentence1`/`sentence2`, and `label`; GLUE's hub names (qqp question1/2,
mnli premise/hypothesis, qnli question/sentence) and `text` also count. Labels are class indices,
class names (sorted, or a hub ClassLabel's names) or numbers for a regression (STS-B, or any float
label: label_names None). The metric is the GLUE task's when hf_config or the file / folder name
names one, else accuracy (Pearson/Spearman for a regression). Bad input: one UserError line.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from blocklab.data.config import DataConfig
from blocklab.data.documents import SplitRule
from blocklab.data.examples import Example, LabelledData
from blocklab.data.lines import read_lines
from blocklab.data.scores import REGRESSION_METRICS, check_metric, majority_baseline
from blocklab.data.sources import json_lines
from blocklab.errors import UserError

VAL_FRACTION = 0.1  # of a single table's rows, by hash
VAL_SPLITS = ("validation", "validation_matched", "dev", "dev_matched", "val", "valid")  # first found wins
# Pairs first: qnli's question/sentence must not be read as the single text "sentence".
GENERIC_TEXTS = (
    ("sentence1", "sentence2"),
    ("question1", "question2"),
    ("premise", "hypothesis"),
    ("question", "sentence"),
    ("sentence",),
    ("text",),
)


@dataclass(frozen=True)
class GlueTask:
    name: str
    texts: tuple[str, ...]  # the hub's text column(s)
    n_labels: int  # 1: a regression
    metric: str
    # The columns of the TSV files from gluebenchmark.com, where they differ from the hub's.
    tsv_texts: tuple[str, ...] = ()
    tsv_label: str | None = None


GLUE_TASKS = {
    t.name: t
    for t in (
        GlueTask("cola", ("sentence",), 2, "matthews"),
        GlueTask("sst2", ("sentence",), 2, "accuracy"),
        GlueTask("mrpc", ("sentence1", "sentence2"), 2, "f1_accuracy", ("#1 String", "#2 String"), "Quality"),
        GlueTask("qqp", ("question1", "question2"), 2, "f1_accuracy", (), "is_duplicate"),
        GlueTask("stsb", ("sentence1", "sentence2"), 1, "pearson_spearman", (), "score"),
        GlueTask("mnli", ("premise", "hypothesis"), 3, "accuracy", ("sentence1", "sentence2"), "gold_label"),
        GlueTask("qnli", ("question", "sentence"), 2, "accuracy"),
        GlueTask("rte", ("sentence1", "sentence2"), 2, "accuracy"),
        GlueTask("wnli", ("sentence1", "sentence2"), 2, "accuracy"),
    )
}


def glue_task(name: str | None) -> GlueTask | None:
    """The GLUE task a config or file name means: "SST-2", "sst2", "mrpc_train", "glue.cola"."""

    def norm(s: str) -> str:
        return re.sub(r"[^a-z0-9]", "", s.lower())

    parts = [name, *re.split(r"[._\s]+", name)] if name else []
    return next((GLUE_TASKS[norm(p)] for p in parts if norm(p) in GLUE_TASKS), None)


@dataclass
class _Table:
    """Rows as columns, and where each row came from (for messages and Example.doc)."""

    where: str  # the file, or "data source hf:X split 'train'"
    columns: dict[str, list]
    lines: list[int] | None = None  # each row's line in its file; None: messages say "row i"
    features: dict = field(default_factory=dict)  # a hub dataset's column types
    rows: list[int] | None = None  # each row's index in its source, kept by a cut: Example.doc

    def __post_init__(self):
        if self.rows is None:
            self.rows = list(range(len(next(iter(self.columns.values()), []))))

    def at(self, i: int) -> str:
        return f"{self.where} line {self.lines[i]}" if self.lines else f"{self.where} row {self.rows[i]}"

    def take(self, idx: list[int]) -> _Table:
        return _Table(
            self.where,
            {c: [v[i] for i in idx] for c, v in self.columns.items()},
            [self.lines[i] for i in idx] if self.lines else None,
            self.features,
            [self.rows[i] for i in idx],
        )


def _read_tsv(path: Path) -> _Table:
    numbered = [(n, line.rstrip("\r")) for n, line in enumerate(read_lines(path), start=1) if line.strip()]
    if not numbered:
        raise UserError(f"data file {path} is empty")
    (header_line, header), rows = numbered[0], numbered[1:]
    names = [c.strip() for c in header.lstrip("\ufeff").split("\t")]
    if len(set(names)) != len(names):
        raise UserError(f"{path} line {header_line}: the header names a column twice ({', '.join(names)})")
    if not rows:
        raise UserError(f"data file {path} has a header but no rows")
    cells = [line.split("\t") for _, line in rows]
    bad = next((i for i, fields in enumerate(cells) if len(fields) != len(names)), None)
    if bad is not None:
        raise UserError(
            f"{path} line {rows[bad][0]}: expected {len(names)} tab-separated fields as in the header, "
            f"found {len(cells[bad])}"
        )
    return _Table(str(path), {c: list(v) for c, v in zip(names, zip(*cells))}, [n for n, _ in rows])


def _read_file(path: Path) -> _Table:
    if path.suffix.lower() == ".tsv":
        return _read_tsv(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise UserError(f"data file {path} must end in .tsv (with a header row) or .jsonl")
    records = list(json_lines(path))
    if not records:
        raise UserError(f"data file {path} is empty")
    bad = next((n for n, r in records if not isinstance(r, dict)), None)
    if bad is not None:
        raise UserError(f"{path} line {bad}: expected a JSON object with the row's columns")
    names = dict.fromkeys(k for _, r in records for k in r)  # a key a row lacks is None there
    return _Table(str(path), {c: [r.get(c) for _, r in records] for c in names}, [n for n, _ in records])


def _read_folder(folder: Path) -> tuple[_Table, _Table | None]:
    def find(stems):
        paths = (folder / f"{s}{ext}" for s in stems for ext in (".tsv", ".jsonl"))
        return next((p for p in paths if p.is_file()), None)

    train, val = find(("train",)), find(VAL_SPLITS)
    if train is None:
        raise UserError(f"folder {folder} has no train.tsv or train.jsonl (GLUE's layout: train.tsv and dev.tsv)")
    return _read_file(train), (_read_file(val) if val else None)


def _pick_columns(names, task: GlueTask | None, where: str) -> tuple[tuple[str, ...], str]:
    """(text columns, label column) among `names`, the task's own names first."""
    options = ((task.texts, task.tsv_texts) if task else ()) + GENERIC_TEXTS
    texts = next((o for o in options if o and all(c in names for c in o)), None)
    label = next((c for c in ("label", task and task.tsv_label) if c and c in names), None)
    found = ", ".join(map(repr, names)) or "none"
    if label is None:
        raise UserError(f"{where}: dataset without labels: no 'label' column (columns found: {found})")
    if texts is None:
        raise UserError(
            f"{where}: no text columns: expected 'sentence', or 'sentence1' and 'sentence2' "
            f"(or question1/question2, premise/hypothesis, question/sentence); columns found: {found}"
        )
    return texts, label


def _hf_tables(spec: str, hf_config: str | None, task, cache_dir) -> tuple[_Table, _Table | None]:
    """The train and validation splits of a local path or a hub name, through `datasets`."""
    import datasets

    from blocklab.data.hf import BUILDERS, load_from_disk, short_error

    path, hub = Path(spec).expanduser(), False
    try:
        if (path / "dataset_dict.json").exists():  # open only the splits we read: an empty one cannot be opened
            names = [n for n in ("train", *VAL_SPLITS) if (path / n / "state.json").exists()]
            ds = {n: load_from_disk(path / n, spec, DataConfig(source=f"hf:{spec}", split=n)) for n in names}
        elif (path / "state.json").exists():
            ds = load_from_disk(path, spec, DataConfig(source=f"hf:{spec}"))  # says "split 'train' is empty"
        elif path.is_dir():
            ds = datasets.load_dataset(str(path), cache_dir=cache_dir)
        elif path.is_file() and path.suffix.lower() in BUILDERS:
            ds = datasets.load_dataset(
                BUILDERS[path.suffix.lower()], data_files={"train": str(path)}, cache_dir=cache_dir
            )
        elif path.exists() or spec.startswith((".", "/", "~")) or path.suffix.lower() in BUILDERS:
            raise UserError(
                f"data source hf:{spec} does not exist or is not a {', '.join(sorted(BUILDERS))} "
                "file, a folder of them or a save_to_disk folder"
            )
        else:
            hub = True
            ds = datasets.load_dataset(spec, hf_config, cache_dir=cache_dir)
    except UserError:
        raise
    except Exception as e:  # datasets, huggingface_hub, fsspec, pyarrow raise many kinds: all mean "cannot load"
        how = "from the Hugging Face hub or from `datasets`' cache" if hub else "with `datasets`"
        raise UserError(f"data source hf:{spec}: cannot load it {how} ({short_error(e)})") from None
    splits = dict(ds) if isinstance(ds, dict) else {"train": ds}  # a DatasetDict is a dict
    if "train" not in splits:
        listed = f" (splits: {', '.join(splits)})" if splits else ""
        raise UserError(f"data source hf:{spec} has no 'train' split{listed}")
    val_name = next((s for s in VAL_SPLITS if s in splits), None)

    def table(name: str) -> _Table:
        ds, where = splits[name], f"data source hf:{spec} split {name!r}"
        texts, label = _pick_columns(ds.column_names, task, where)
        return _Table(where, ds.select_columns(list(texts) + [label]).to_dict(), features=dict(ds.features))

    return table("train"), (table(val_name) if val_name else None)


def _cut(table: _Table) -> tuple[_Table, _Table]:
    rule = SplitRule(VAL_FRACTION, (f"row {i}" for i in table.rows))
    is_val = [rule.is_val(f"row {i}") for i in table.rows]
    return table.take([i for i, v in enumerate(is_val) if not v]), table.take([i for i, v in enumerate(is_val) if v])


def _parse_label(value):
    """int, float or str; None when missing. TSV gives strings: "1" is a class index, "4.25" a
    regression target, anything else a class name. JSON true / false are 1 / 0."""
    if not isinstance(value, str):
        return int(value) if isinstance(value, bool) else value
    for kind in (int, float):
        try:
            number = kind(value.strip())
            return number if math.isfinite(number) else value.strip()
        except ValueError:
            pass
    return value.strip() or None


def _raw_labels(table: _Table, col: str) -> list:
    out = [_parse_label(v) for v in table.columns[col]]
    for i, v in enumerate(out):
        if not isinstance(v, (int, float, str)):
            raise UserError(
                f"{table.at(i)}: no label in column {col!r}"
                if v is None
                else f"{table.at(i)}: label {v!r} is not a number or a class name"
            )
    if all(v == -1 for v in out):
        raise UserError(f"{table.where}: every label is -1, as in GLUE's test split: these rows have no labels")
    return out


def _index(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and v == int(v) and v >= 0 else None


def _label_space(train: _Table, val: _Table, col: str, task: GlueTask | None):
    """(label_names, or None for a regression; training targets; validation targets)."""
    tr, va = _raw_labels(train, col), _raw_labels(val, col)
    feature = train.features.get(col)
    class_names = getattr(feature, "names", None)  # a hub ClassLabel
    strings = class_names is None and any(isinstance(v, str) for v in tr + va)
    floats = str(getattr(feature, "dtype", "")).startswith("float") or any(isinstance(v, float) for v in tr + va)
    if (task.n_labels == 1) if task else (floats and not strings):
        for table, ys in ((train, tr), (val, va)):
            bad = next((i for i, v in enumerate(ys) if isinstance(v, str)), None)
            if bad is not None:
                raise UserError(f"{table.at(bad)}: label {ys[bad]!r} is not a number (a regression task)")
        return None, [float(v) for v in tr], [float(v) for v in va]
    if strings:
        names = sorted({str(v) for v in tr})
        position = {n: k for k, n in enumerate(names)}
        y_train, y_val = ([position.get(str(v)) for v in ys] for ys in (tr, va))
    else:
        y_train, y_val = ([_index(v) for v in ys] for ys in (tr, va))
        bad = next((i for i, k in enumerate(y_train) if k is None or (class_names and k >= len(class_names))), None)
        if bad is not None:
            raise UserError(
                f"{train.at(bad)}: label {tr[bad]!r} is not a class index"
                + (f" of {len(class_names)} classes" if class_names else "")
            )
        names = list(class_names or map(str, range(max(max(y_train) + 1, task.n_labels if task else 2))))
    seen = set(y_train)
    if len(seen) < 2:
        raise UserError(f"{train.where}: every training label is {tr[0]!r}: a classifier needs two classes or more")
    bad = next((i for i, k in enumerate(y_val) if k not in seen), None)  # seen: only valid indices
    if bad is not None:
        shown = names[y_val[bad]] if class_names and y_val[bad] is not None and y_val[bad] < len(names) else va[bad]
        raise UserError(
            f"{val.at(bad)}: unknown label {shown!r}: the training split has no such label "
            f"(training labels: {', '.join(names[k] for k in sorted(seen))})"
        )
    return names, y_train, y_val


def _examples(table: _Table, texts: tuple[str, ...], ys: list) -> list[Example]:
    for col in texts:
        bad = next((i for i, v in enumerate(table.columns[col]) if not isinstance(v, str)), None)
        if bad is not None:
            value = table.columns[col][bad]
            raise UserError(
                f"{table.at(bad)}: no text in column {col!r}"
                if value is None
                else f"{table.at(bad)}: column {col!r} holds {value!r}, not text"
            )
    pairs = table.columns[texts[1]] if len(texts) > 1 else [None] * len(ys)
    return [Example(t, y, p, f"row {r}") for t, p, y, r in zip(table.columns[texts[0]], pairs, ys, table.rows)]


def load_glue_layout(
    source: str, hf_config: str | None = None, log: Callable = print, cache_dir=None, metric: str | None = None
) -> LabelledData:
    """GLUE-layout data (see the module docstring). `cache_dir`: blocklab's cache folder (`data.cache_dir`);
    `datasets` then keeps its files in its "hf-datasets" subfolder, apart from blocklab's entries (None:
    `datasets`' own default, shared with other tools). `metric` overrides the task's."""
    if metric is not None:
        check_metric(metric)
    if source.startswith("hf:"):
        spec = source[3:].strip()
        if not spec:
            raise UserError("data source 'hf:' needs a dataset name or a path, e.g. hf:nyu-mll/glue")
        name = hf_config or Path(spec.rstrip("/")).name
        task = glue_task(hf_config) or glue_task(Path(spec.rstrip("/")).name)
        train, val = _hf_tables(
            spec, hf_config, task, str(Path(cache_dir).expanduser() / "hf-datasets") if cache_dir else None
        )
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise UserError(
                f"data source {source!r} does not exist (expected a .tsv or .jsonl file, a folder "
                "with train.tsv and dev.tsv, or hf:NAME_OR_PATH)"
            )
        name = path.name if path.is_dir() else path.stem
        task = glue_task(name)
        train, val = _read_folder(path) if path.is_dir() else (_read_file(path), None)
    how = "the source's own splits"
    if val is None:  # one table: cut it as the corpora are cut, by the hash of each row's name
        train, val = _cut(train)
        how = f"{VAL_FRACTION:.0%} of the rows by hash"
    for table, part in ((train, "training"), (val, "validation")):
        if not table.rows:
            raise UserError(f"{table.where}: the {part} split is empty")
    texts, label = _pick_columns(list(train.columns), task, train.where)
    _pick_columns(list(val.columns), task, val.where)  # the validation split must have them too
    label_names, y_train, y_val = _label_space(train, val, label, task)
    regression = label_names is None
    if metric is not None and (metric in REGRESSION_METRICS) != regression:
        raise UserError(f"metric {metric!r} does not fit {'regression' if regression else 'class'} labels")
    if metric is None:
        fits = task is not None and (task.n_labels == 1) == regression
        metric = task.metric if fits else ("pearson_spearman" if regression else "accuracy")
    data = LabelledData(
        task.name if task else name, _examples(train, texts, y_train), _examples(val, texts, y_val), label_names, metric
    )
    data.info = {
        "source": source,
        "split": how,
        "columns": [*texts, label],
        "train": len(y_train),
        "val": len(y_val),
        "baseline": majority_baseline(y_train, y_val, metric),
    }
    summary = f"{data.name}: {len(y_train)} training and {len(y_val)} validation examples ({how}), "
    if regression:
        log(summary + f"regression, metric {metric}")
        return data
    counts = {
        part: {label_names[k]: n for k, n in sorted(Counter(ys).items())}
        for part, ys in (("train", y_train), ("val", y_val))
    }
    data.info.update(label_counts=counts, majority_accuracy=majority_baseline(y_train, y_val, "accuracy")["score"])
    other = f", {metric} {data.info['baseline']['score']:.1f}" if metric != "accuracy" else ""
    log(
        summary + f"{data.n_labels} labels (training: {', '.join(f'{k} {n}' for k, n in counts['train'].items())}), "
        f"metric {metric}; majority-class baseline on validation: accuracy {data.info['majority_accuracy']:.1f}{other}"
    )
    return data
