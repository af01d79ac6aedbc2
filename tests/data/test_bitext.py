"""Parallel text: .tsv, JSON lines, hf: with a translation column, gettext; the split; the prepared corpus."""

import json

import numpy as np
import pytest

from blocklab.data import DataConfig
from blocklab.data.bitext import prepare_parallel, read_parallel, split_pairs, unigram_loss
from blocklab.errors import UserError

from .test_gettext import write_mo

QUIET = dict(log=lambda *a: None)
PAIRS = [(f"Satz Nummer {i} ist hier.", f"Sentence number {i} is here.") for i in range(60)]


def cfg(tmp_path, source, **kw):
    return DataConfig(
        source=str(source), vocab_size=300, seq_len=32, val_fraction=0.2, cache_dir=str(tmp_path / "cache"), **kw
    )


def write_tsv(path, pairs):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


def test_tsv_and_both_jsonl_layouts_read_the_same_pairs(tmp_path):
    rows = PAIRS[:5] + [PAIRS[0], ("  ", "empty source"), ("Ein  Satz\u00a0mit  Leerraum ", "Spaces")]
    tsv = write_tsv(tmp_path / "a.tsv", rows)
    flat = tmp_path / "b.jsonl"
    flat.write_text("\n".join(json.dumps({"src": s, "tgt": t}) for s, t in rows) + "\n")
    nested = tmp_path / "c.jsonl"
    nested.write_text("\n".join(json.dumps({"translation": {"de": s, "en": t}}) for s, t in rows) + "\n\n")
    got = [read_parallel(cfg(tmp_path, p)) for p in (tsv, flat, nested)]
    want = PAIRS[:5] + [("Ein Satz mit Leerraum", "Spaces")]
    for g in got:
        assert g.pairs == want
        assert (g.counts["duplicate"], g.counts["empty"], g.counts["kept"]) == (1, 1, 6)


def test_translation_object_follows_the_languages(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"translation": {"de": "Hallo", "en": "Hello", "fr": "Bonjour"}}) + "\n")
    assert read_parallel(cfg(tmp_path, p, src_lang="fr", tgt_lang="de")).pairs == [("Bonjour", "Hallo")]


def test_hf_dataset_with_a_translation_column(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    ds = datasets.Dataset.from_dict({"translation": [{"de": s, "en": t} for s, t in PAIRS[:8]]})
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "t.parquet"))
    for source in (f"hf:{tmp_path / 'saved'}", f"hf:{tmp_path / 't.parquet'}"):
        assert read_parallel(cfg(tmp_path, source)).pairs == PAIRS[:8]
    with pytest.raises(UserError, match="no field 'pairs'"):
        read_parallel(cfg(tmp_path, f"hf:{tmp_path / 'saved'}", text_field="pairs"))
    with pytest.raises(UserError, match='"fr"'):
        read_parallel(cfg(tmp_path, f"hf:{tmp_path / 'saved'}", src_lang="fr"))


def test_split_is_deterministic_and_no_source_sentence_is_on_both_sides():
    pairs = PAIRS + [(PAIRS[3][0], "Another translation of sentence 3.")]
    train, val = split_pairs(pairs, 0.2)
    assert (train, val) == split_pairs(list(pairs), 0.2)
    assert train and val and len(train) + len(val) == len(pairs)
    assert not {s for s, _ in train} & {s for s, _ in val}
    assert not set(train) & set(val)
    # a pair's side depends on its source only: adding pairs moves no other pair
    more_train, more_val = split_pairs(pairs + [("Neu", "New")], 0.2)
    assert set(train) <= set(more_train) and set(val) <= set(more_val)


def test_prepared_corpus_round_trips_and_is_cached(tmp_path):
    c = prepare_parallel(cfg(tmp_path, write_tsv(tmp_path / "p.tsv", PAIRS)), **QUIET)
    train, val = split_pairs(PAIRS, 0.2)
    for index, pairs in ((c.train, train), (c.val, val)):
        assert len(index) == len(pairs)
        for i, (s, t) in enumerate(pairs):
            src, tgt = index.source(i), index.target(i)
            assert src[-1] == c.eod_id and tgt[-1] == c.eod_id  # each side ends in <eod>
            assert (c.decode(src[:-1]), c.decode(tgt[:-1])) == (s, t)
    assert c.stats["pairs"] == 60 and c.stats["words_src"] == 5 * 60
    assert c.unigram_entropy > 0 and unigram_loss(c.tgt_counts, 0.1) > c.unigram_entropy
    again = prepare_parallel(cfg(tmp_path, tmp_path / "p.tsv"), **QUIET)
    assert again.stats["cache_hit"] and np.array_equal(np.asarray(again.train.tokens), np.asarray(c.train.tokens))


def test_unigram_loss_is_the_smoothed_loss_of_the_best_unigram_prediction():
    counts = np.array([5.0, 3.0, 2.0, 0.0])
    p = counts / counts.sum()
    assert unigram_loss(counts, 0.0) == pytest.approx(-(p[:3] * np.log(p[:3])).sum())
    eps = 0.1
    q = (1 - eps) * p + eps / 4

    # q minimises the smoothed cross-entropy (1 - eps) CE(p, q) + eps CE(uniform, q): any other is worse
    def smoothed(r):
        return -(1 - eps) * (p * np.log(r)).sum() - eps * np.log(r).mean()

    assert unigram_loss(counts, eps) == pytest.approx(smoothed(q))
    assert smoothed(np.array([0.4, 0.3, 0.2, 0.1])) > smoothed(q)


def test_gettext_source_reads_a_locale_folder_of_its_own(tmp_path):
    root = tmp_path / "locale"
    write_mo(root / "de" / "LC_MESSAGES" / "a.mo", [(t, s) for s, t in PAIRS])
    c = prepare_parallel(cfg(tmp_path, f"gettext:{root}"), **QUIET)
    assert len(c.train) + len(c.val) == 60 and c.stats["cleaning"]["kept"] == 60
    with pytest.raises(UserError, match="no gettext catalogs for language 'fr'"):
        read_parallel(cfg(tmp_path, f"gettext:{root}", src_lang="fr"))


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("bad.tsv", "one\ttwo\tthree\n", "line 1: expected 'source<TAB>target', found 3"),
        ("bad.tsv", "no tab here\n", "found 1"),
        ("empty.tsv", "\n\n", "is empty"),
        ("blank.tsv", "\tx\n y\t\n", "no sentence pair with text on both sides"),
        ("bad.jsonl", '{"src": "a", "tgt": "b"}\n{oops\n', "line 2: invalid JSON"),
        ("bad.jsonl", '{"text": "a"}\n', 'line 1: expected "src" and "tgt"'),
        ("bad.jsonl", '{"translation": {"de": "a"}}\n', '"de" and "en"'),
        ("bad.jsonl", '{"src": 1, "tgt": "b"}\n', "must be strings"),
        ("bad.txt", "a\tb\n", "must end in .tsv"),
    ],
)
def test_bad_inputs_are_one_line(tmp_path, name, content, match):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(UserError, match=match) as e:
        read_parallel(cfg(tmp_path, p))
    assert "\n" not in str(e.value)


def test_more_bad_inputs(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_parallel(cfg(tmp_path, tmp_path / "missing.tsv"))
    p = tmp_path / "latin1.tsv"
    p.write_bytes("gut\tgood\nschön\tnice\n".encode("latin-1"))
    with pytest.raises(UserError, match="line 2: not valid UTF-8"):
        read_parallel(cfg(tmp_path, p))
    with pytest.raises(UserError, match="too few to split"):
        prepare_parallel(cfg(tmp_path, write_tsv(tmp_path / "one.tsv", PAIRS[:1])), **QUIET)
    with pytest.raises(UserError, match="hf:"):
        read_parallel(cfg(tmp_path, "hf:"))
