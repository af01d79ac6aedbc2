"""`data.source = "hf:NAME_OR_PATH"`: corpora through the Hugging Face `datasets` library.

NAME_OR_PATH is tried in this order:
- a folder written by `save_to_disk` (it holds state.json or dataset_dict.json);
- a data file, or a glob of them, by extension: .parquet, .json / .jsonl, .csv, .txt
  (a .txt file gives one document per paragraph, i.e. per blank-line-separated block);
- a folder of data files (`datasets` infers the format and the splits from the names);
- anything else is a hub dataset name, read with `data.hf_config`, `data.split` and,
  for sets too big to download first, `data.streaming`.
Each row's `data.text_field` is one document; validation is cut from `data.split` by a
hash of the row number (`data.val_fraction`), as files are cut by name.

Cache key: for local data, a hash of the files' names and bytes, so a cache hit never
calls `datasets`; for a hub dataset, its name, config, split and the commit the hub
reports (a commit's content never changes), which is also where an unreachable name
fails, at once and in one line.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from blocklab.data.config import DataConfig
from blocklab.data.documents import DocStream, Document, SplitRule
from blocklab.errors import UserError

BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv", ".txt": "text"}
# Forcing a side of the split non-empty needs every row's name hashed up front: about
# a second per million rows. Bigger sets use the plain hash rule (both sides are then
# certain to be populated anyway).
SPLIT_SCAN_MAX_ROWS = 1_000_000
READ_BATCH_ROWS = 1000
HUB_TIMEOUT_S = 30


def short_error(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _hash_files(paths: list[Path], base: Path) -> str:
    h = hashlib.sha256(b"blocklab-hf-files-v1\x00")
    for p in sorted(paths):
        name = p.relative_to(base).as_posix().encode() if p != base else p.name.encode()
        h.update(len(name).to_bytes(8, "little") + name + p.stat().st_size.to_bytes(8, "little"))
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]


def load_from_disk(path: Path, spec: str, cfg: DataConfig):
    """A `save_to_disk` folder through datasets.load_from_disk; an empty split is a UserError that says so."""
    import datasets

    # An empty split is saved with no data shard, which datasets.load_from_disk cannot open.
    state = (path / cfg.split if (path / "dataset_dict.json").exists() else path) / "state.json"
    try:
        shards = json.loads(state.read_text()).get("_data_files")
    except (OSError, ValueError, AttributeError):
        shards = None
    if shards == []:
        raise UserError(f"data source hf:{spec}: split {cfg.split!r} is empty")
    return datasets.load_from_disk(str(path))


def local_loader(spec: str, cfg: DataConfig):
    """(loader, fingerprint) for a local path or glob, or None if `spec` is not local."""
    import datasets

    path = Path(spec).expanduser()
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        return lambda: load_from_disk(path, spec, cfg), _hash_files(_files_under(path), path)
    if any(c in spec for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise UserError(f"data source hf:{spec}: the pattern matches no files")
    elif path.is_file():
        files = [path]
    elif path.is_dir():
        files = _files_under(path)
        if not files:
            raise UserError(f"data source hf:{spec}: the folder has no data files")
        return (
            lambda: datasets.load_dataset(str(path), split=cfg.split, streaming=cfg.streaming),
            _hash_files(files, path),
        )
    elif spec.startswith((".", "/", "~")) or path.suffix.lower() in BUILDERS:
        raise UserError(f"data source hf:{spec} does not exist")
    else:
        return None
    kinds = {BUILDERS.get(f.suffix.lower()) for f in files}
    if None in kinds or len(kinds) != 1:
        raise UserError(
            f"data source hf:{spec}: expected data files of one kind "
            f"({', '.join(sorted(BUILDERS))}), got {', '.join(sorted({f.suffix for f in files}))}"
        )
    builder = kinds.pop()
    extra = {"sample_by": "paragraph"} if builder == "text" else {}
    # The files are the split the user asked for, whatever its name.
    data_files = {cfg.split: [str(f) for f in files]}
    return (
        lambda: datasets.load_dataset(
            builder, data_files=data_files, split=cfg.split, streaming=cfg.streaming, **extra
        ),
        _hash_files(files, files[0].parent if len(files) == 1 else Path("/")),
    )


def hub_loader(name: str, cfg: DataConfig):
    """(loader, fingerprint) for a hub dataset name, pinned to the commit the hub reports now."""
    from huggingface_hub import HfApi

    try:
        revision = HfApi().dataset_info(name, timeout=HUB_TIMEOUT_S).sha
    except Exception as e:  # no network, offline mode, unknown or gated name: all mean "cannot read it"
        raise UserError(
            f"data source hf:{name}: cannot reach this dataset on the Hugging Face hub ({short_error(e)})"
        ) from None
    import datasets

    def load():
        return datasets.load_dataset(name, cfg.hf_config, split=cfg.split, streaming=cfg.streaming, revision=revision)

    identity = {"hub": name, "revision": revision}
    return load, hashlib.sha256(repr(sorted(identity.items())).encode()).hexdigest()


def _open_dataset(load: Callable, spec: str, cfg: DataConfig):
    import datasets

    try:
        ds = load()
    except UserError:
        raise
    except Exception as e:  # datasets, fsspec and pyarrow raise many kinds: all mean "cannot load it"
        if "corresponds to no data" in str(e):  # datasets' words for a split without rows
            raise UserError(f"data source hf:{spec}: split {cfg.split!r} is empty") from None
        raise UserError(f"data source hf:{spec}: cannot load it with `datasets` ({short_error(e)})") from None
    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):  # save_to_disk of a DatasetDict
        if cfg.split not in ds:
            raise UserError(
                f"data source hf:{spec} has no split {cfg.split!r} (splits: {', '.join(ds)}); set data.split"
            )
        ds = ds[cfg.split]
    field = cfg.text_field
    if ds.column_names is not None and field not in ds.column_names:
        raise UserError(
            f"data source hf:{spec} has no field {field!r} (fields: {', '.join(ds.column_names)}); set data.text_field"
        )
    feature = ds.features.get(field) if ds.features is not None else None
    if feature is not None and getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise UserError(f"data source hf:{spec}: field {field!r} holds {feature}, not text")
    if isinstance(ds, datasets.Dataset) and len(ds) == 0:
        raise UserError(f"data source hf:{spec}: split {cfg.split!r} is empty")
    return ds


def _text_bytes(ds, field: str) -> int | None:
    """Total UTF-8 bytes of the text column, from Arrow's metadata-speed kernels."""
    try:
        import pyarrow.compute as pc

        return int(pc.sum(pc.binary_length(ds.data.column(field))).as_py() or 0)
    except Exception:  # an exotic table layout: the tokenizer sample then takes a prefix
        return None


def hf_stream(cfg: DataConfig, log: Callable) -> DocStream:
    import datasets

    spec = cfg.source[3:].strip()
    if not spec:
        raise UserError("data source 'hf:' needs a dataset name or a path, e.g. hf:wikitext or hf:data/train.parquet")
    local = local_loader(spec, cfg)
    load, fingerprint = local if local is not None else hub_loader(spec, cfg)
    settings = {"text_field": cfg.text_field, "split": cfg.split, "hf_config": cfg.hf_config if local is None else None}
    field, state = cfg.text_field, {}

    def dataset():
        if "ds" not in state:
            state["ds"] = _open_dataset(load, spec, cfg)
            n = len(state["ds"]) if isinstance(state["ds"], datasets.Dataset) else None
            names = (f"row {i}" for i in range(n)) if n is not None and n <= SPLIT_SCAN_MAX_ROWS else None
            state["rule"] = SplitRule(cfg.val_fraction, names)
        return state["ds"], state["rule"]

    def read(part: str) -> Iterator[Document]:
        ds, rule = dataset()
        want_val, i = part == "val", 0
        for batch in ds.select_columns([field]).iter(batch_size=READ_BATCH_ROWS):
            for text in batch[field]:
                name, i = f"row {i}", i + 1
                if part != "all" and rule.is_val(name) != want_val:
                    continue
                if text is None or text == "":
                    continue
                if not isinstance(text, str):
                    raise UserError(
                        f"data source hf:{spec} {name}: field {field!r} holds {type(text).__name__}, not text"
                    )
                yield Document(name, text)
        if i == 0:
            raise UserError(f"data source hf:{spec}: split {cfg.split!r} is empty")

    stream = DocStream("hf", f"hf:{spec}", fingerprint, read, settings=settings)
    if local is not None:  # cheap to open: check the field and the split now, before the cache is touched
        ds, _ = dataset()
        total = _text_bytes(ds, field) if isinstance(ds, datasets.Dataset) else None
        if total is not None:
            stream.info = {"files": len(ds), "bytes": total}
            stream.train_bytes = int(total * (1.0 - cfg.val_fraction))
    return stream
