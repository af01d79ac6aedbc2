"""Parallel text for translation: readers, the split, and the prepared (tokenized, cached) corpus.

Sources (`data.source`):
- `gettext` or `gettext:DIR[:DIR...]`: the system's message catalogs (data/gettext.py);
- a `.tsv` file: `source TAB target` per line;
- a `.jsonl` file: `{"src": ..., "tgt": ...}` or `{"translation": {"de": ..., "en": ...}}` per line;
- `hf:NAME_OR_PATH`: a `datasets` dataset with a `translation` column (the Hugging Face layout, e.g.
  IWSLT14 / WMT), or another column named by `data.text_field`, holding {src_lang: ..., tgt_lang: ...}.

Every source gives cleaned (source, target) pairs, each kept once. The split is by the hash of the
source sentence: every pair whose source is the same sentence falls on the same side, so no pair (and
no source sentence) is in both splits. The pairs reach the ordinary corpus pipeline (one byte-level
BPE over both sides, the cache, memory-mapped token arrays) as documents alternating source and
target, each followed by <eod>; <eod> is also the end of sentence and the decoder's start token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blocklab.data.config import DataConfig
from blocklab.data.corpus import Corpus, prepare
from blocklab.data.documents import DocStream, Document, SplitRule, fingerprint_docs
from blocklab.data.lines import read_lines
from blocklab.data.sources import json_lines
from blocklab.errors import UserError

PAIRS_FORMAT = 1  # bump when the cleaning or the pair layout changes: old cache entries stop matching
_SPACE = re.compile(r"\s+")


@dataclass
class ParallelText:
    kind: str  # "gettext" | "tsv" | "jsonl" | "hf"
    root: str
    pairs: list[tuple[str, str]]
    counts: dict = field(default_factory=dict)
    identity: str | None = None  # hf hub datasets: name and revision, instead of hashing the pairs


def _tidy(text) -> str:
    return _SPACE.sub(" ", text).strip() if isinstance(text, str) else ""


def _unique(raw, root: str, kind: str, **counts) -> ParallelText:
    seen, pairs, empty = set(), [], 0
    for src, tgt in raw:
        pair = (_tidy(src), _tidy(tgt))
        if not pair[0] or not pair[1]:
            empty += 1
        elif pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    if not pairs:
        raise UserError(f"{root} holds no sentence pair with text on both sides")
    return ParallelText(
        kind, root, pairs, {**counts, "empty": empty, "duplicate": len(raw) - empty - len(pairs), "kept": len(pairs)}
    )


def read_tsv(path: Path) -> ParallelText:
    lines = read_lines(path)
    if not any(line.strip() for line in lines):
        raise UserError(f"data file {path} is empty")
    raw = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cols = line.rstrip("\r").split("\t")
        if len(cols) != 2:
            raise UserError(f"{path} line {n}: expected 'source<TAB>target', found {len(cols)} tab-separated fields")
        raw.append(tuple(cols))
    return _unique(raw, str(path), "tsv")


def _pair_of(record, src: str, tgt: str, where: str, key: str | None = None) -> tuple[str, str]:
    if isinstance(record, dict) and key is None and "src" in record and "tgt" in record:
        pair = record["src"], record["tgt"]
    else:
        obj = record.get(key or "translation") if isinstance(record, dict) else None
        if not isinstance(obj, dict) or src not in obj or tgt not in obj:
            want = f'"{key}"' if key else '"src" and "tgt" fields, or a "translation"'
            raise UserError(f'{where}: expected {want} object with "{src}" and "{tgt}" (data.src_lang / data.tgt_lang)')
        pair = obj[src], obj[tgt]
    if not all(isinstance(x, str) or x is None for x in pair):
        raise UserError(f"{where}: the source and the target must be strings")
    return pair


def read_jsonl(path: Path, src: str, tgt: str) -> ParallelText:
    raw = [_pair_of(record, src, tgt, f"{path} line {n}") for n, record in json_lines(path)]
    if not raw:
        raise UserError(f"data file {path} is empty")
    return _unique(raw, str(path), "jsonl")


def read_hf(cfg: DataConfig) -> ParallelText:
    """A `datasets` dataset (local files or folder, or a hub name) through the hf: loaders of data/hf.py."""
    from blocklab.data.hf import hub_loader, local_loader, short_error

    spec = cfg.source[3:].strip()
    if not spec:
        raise UserError("data source 'hf:' needs a dataset name or a path, e.g. hf:data/train.parquet")
    key = "translation" if cfg.text_field == "text" else cfg.text_field
    local = local_loader(spec, cfg)
    load, fingerprint = local if local is not None else hub_loader(spec, cfg)
    try:
        ds = load()
    except UserError:
        raise
    except Exception as e:  # datasets, fsspec and pyarrow raise many kinds: all mean "cannot load it"
        raise UserError(f"data source hf:{spec}: cannot load it with `datasets` ({short_error(e)})") from None
    if hasattr(ds, "keys") and not hasattr(ds, "column_names"):  # a DatasetDict from save_to_disk
        if cfg.split not in ds:
            raise UserError(f"data source hf:{spec} has no split {cfg.split!r} (splits: {', '.join(ds)})")
        ds = ds[cfg.split]
    if ds.column_names is not None and key not in ds.column_names:
        raise UserError(
            f"data source hf:{spec} has no field {key!r} (fields: {', '.join(ds.column_names)}); "
            "set data.text_field to the column holding {src_lang: ..., tgt_lang: ...}"
        )
    raw = [
        _pair_of(row, cfg.src_lang, cfg.tgt_lang, f"hf:{spec} row {i}", key)
        for i, row in enumerate(ds.select_columns([key]))
    ]
    if not raw:
        raise UserError(f"data source hf:{spec}: split {cfg.split!r} is empty")
    text = _unique(raw, f"hf:{spec}", "hf")
    text.identity = fingerprint if local is None else None
    return text


def read_parallel(cfg: DataConfig) -> ParallelText:
    """The configured parallel source as cleaned, unique pairs; every bad input is a one-line UserError."""
    source = cfg.source
    if source == "gettext" or source.startswith("gettext:"):
        from blocklab.data.gettext import gettext_pairs

        roots = [Path(p).expanduser() for p in source[len("gettext:") :].split(":") if p] or None
        got = gettext_pairs(cfg.src_lang, cfg.tgt_lang, roots)
        if not got.pairs:
            raise UserError(
                f"the gettext catalogs for {cfg.src_lang}-{cfg.tgt_lang} hold no usable message pair "
                f"({len(got.catalogs)} catalogs read)"
            )
        return ParallelText("gettext", source, got.pairs, got.counts)
    if source.startswith("hf:"):
        return read_hf(cfg)
    path = Path(source).expanduser()
    if not path.is_file():
        raise UserError(
            f"parallel data source {source!r} does not exist; translation reads 'gettext', "
            "'gettext:DIR', a .tsv file, a .jsonl file or 'hf:NAME_OR_PATH'"
        )
    if path.suffix.lower() == ".tsv":
        return read_tsv(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return read_jsonl(path, cfg.src_lang, cfg.tgt_lang)
    raise UserError(
        f"parallel data file {path} must end in .tsv (source TAB target) or .jsonl (src/tgt or translation objects)"
    )


def split_pairs(pairs: list[tuple[str, str]], val_fraction: float):
    """(train, val): by the hash of the source sentence, both sides non-empty when there are two sources."""
    sources = list(dict.fromkeys(s for s, _ in pairs))
    if len(sources) < 2:
        raise UserError(
            f"{len(pairs)} sentence pair(s) with {len(sources)} distinct source sentence: too few "
            "to split into training and validation"
        )
    rule = SplitRule(val_fraction, sources)
    val = [rule.is_val(s) for s, _ in pairs]
    return [p for p, v in zip(pairs, val) if not v], [p for p, v in zip(pairs, val) if v]


def pair_stream(text: ParallelText, cfg: DataConfig) -> DocStream:
    train, val = split_pairs(text.pairs, cfg.val_fraction)

    def docs(pairs, part):
        for i, (src, tgt) in enumerate(pairs):
            yield Document(f"{part} {i} src", src)
            yield Document(f"{part} {i} tgt", tgt)

    parts = {"train": train, "val": val}

    def read(part):
        return docs(parts[part], part) if part != "all" else (d for p in ("train", "val") for d in docs(parts[p], p))

    fingerprint = text.identity or fingerprint_docs(read("all"))
    n_bytes = sum(len(s.encode()) + len(t.encode()) for s, t in text.pairs)
    settings = {"parallel": PAIRS_FORMAT, "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang, "split": "by source"}
    info = {
        "files": 2 * len(text.pairs),
        "bytes": n_bytes,
        "pairs": len(text.pairs),
        "pairs_train": len(train),
        "pairs_val": len(val),
        "cleaning": text.counts,
        "words_src": sum(len(s.split()) for s, _ in text.pairs),
        "words_tgt": sum(len(t.split()) for _, t in text.pairs),
    }
    return DocStream(
        f"parallel-{text.kind}",
        text.root,
        fingerprint,
        read,
        settings=settings,
        info=info,
        train_bytes=sum(len(s.encode()) + len(t.encode()) for s, t in train),
    )


@dataclass
class PairIndex:
    """Where each pair's source and target (each ending in <eod>) lie in a split's token array."""

    tokens: np.ndarray
    src: np.ndarray  # (n, 2) int64: [start, end) of the source ids, <eod> included
    tgt: np.ndarray

    @classmethod
    def from_starts(cls, tokens: np.ndarray, starts: np.ndarray) -> PairIndex:
        bounds = np.append(np.asarray(starts, dtype=np.int64), len(tokens))
        if (len(bounds) - 1) % 2:
            raise ValueError("a parallel corpus must hold an even number of documents")
        return cls(tokens, np.stack([bounds[0:-1:2], bounds[1::2]], 1), np.stack([bounds[1::2], bounds[2::2]], 1))

    def __len__(self) -> int:
        return len(self.src)

    def source(self, i: int) -> np.ndarray:
        return np.asarray(self.tokens[self.src[i, 0] : self.src[i, 1]], dtype=np.int64)

    def target(self, i: int) -> np.ndarray:
        return np.asarray(self.tokens[self.tgt[i, 0] : self.tgt[i, 1]], dtype=np.int64)


def unigram_loss(counts: np.ndarray, smoothing: float) -> float:
    """The training objective's value for a decoder that predicts the target token frequencies p:
    the entropy of p without label smoothing; with it, the smoothed loss at its best unigram
    prediction q = (1 - eps) p + eps / V. Stalled-run detection compares the training loss with it."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts / counts.sum()
    if not smoothing:
        nz = p[p > 0]
        return float(-(nz * np.log(nz)).sum())
    q = (1 - smoothing) * p + smoothing / len(p)
    return float(-(1 - smoothing) * (p * np.log(q)).sum() - smoothing * np.log(q).mean())


@dataclass
class ParallelCorpus:
    corpus: Corpus
    train: PairIndex
    val: PairIndex
    tgt_counts: np.ndarray  # token counts of the training targets
    label_smoothing: float = 0.0  # of the run's objective: sets the stall reference (unigram_entropy)

    def __getattr__(self, name):  # tokenizer, vocab_size, pad_id, eod_id, stats, encode, decode ...
        if name == "corpus":
            raise AttributeError(name)
        return getattr(self.corpus, name)

    @property
    def unigram_entropy(self) -> float:
        """The training loss of a decoder that learned only the targets' token frequencies."""
        return unigram_loss(self.tgt_counts, self.label_smoothing)


def prepare_parallel(cfg: DataConfig, log: Callable = print) -> ParallelCorpus:
    """Read, clean and split the pairs, then tokenize and cache them like any corpus (data/corpus.py)."""
    text = read_parallel(cfg)
    stream = pair_stream(text, cfg)
    corpus = prepare(cfg, log, stream=stream)
    train = PairIndex.from_starts(corpus.train, corpus.train_doc_starts)
    val = PairIndex.from_starts(corpus.val, corpus.val_doc_starts)
    lengths = train.tgt[:, 1] - train.tgt[:, 0]
    idx = np.arange(lengths.sum()) + np.repeat(train.tgt[:, 0] - (np.cumsum(lengths) - lengths), lengths)
    counts = np.bincount(np.asarray(corpus.train)[idx], minlength=corpus.vocab_size)
    c = text.counts
    log(
        f"data: {len(text.pairs):,} {cfg.src_lang}-{cfg.tgt_lang} pairs ({len(train):,} train / {len(val):,} val), "
        f"{stream.info['words_src']:,} + {stream.info['words_tgt']:,} words; dropped: "
        + ", ".join(f"{v:,} {k}" for k, v in c.items() if k not in ("kept", "messages", "catalogs") and v)
    )
    return ParallelCorpus(corpus, train, val, counts)
