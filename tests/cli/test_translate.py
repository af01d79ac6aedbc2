"""`blocklab translate` and `blocklab train --model.task translation` as a user runs them."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from blocklab.cli import main

WORDS = {"Haus": "house", "Baum": "tree", "Katze": "cat", "Hund": "dog", "Auto": "car"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("translate")
    german = list(WORDS)
    lines = [
        f"{german[i % 5]} {german[(i * 3) % 5]} {german[(i * 7 + 1) % 5]}\t"
        + " ".join(WORDS[german[j]] for j in (i % 5, (i * 3) % 5, (i * 7 + 1) % 5))
        + f" {i}"
        for i in range(80)
    ]
    (tmp / "pairs.tsv").write_text("\n".join(lines) + "\n")
    out = tmp / "run"
    rc = main(
        [
            "train",
            "--out",
            str(out),
            "--model.task",
            "translation",
            "--model.d_model",
            "32",
            "--model.n_layers",
            "1",
            "--model.n_heads",
            "2",
            "--model.d_ff",
            "64",
            "--data.source",
            str(tmp / "pairs.tsv"),
            "--data.vocab_size",
            "300",
            "--data.seq_len",
            "16",
            "--data.val_fraction",
            "0.1",
            "--train.steps",
            "12",
            "--train.batch_size",
            "8",
            "--train.eval_every",
            "6",
            "--train.eval_batches",
            "1",
            "--train.checkpoint_every",
            "6",
            "--train.label_smoothing",
            "0.1",
        ]
    )
    assert rc == 0
    return out


def test_train_writes_bleu(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["task"] == "translation" and "final_bleu" in summary and "best_bleu" in summary
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "bleu" in r] == [6, 12]


def test_translate_stdin_one_line_per_line(run_dir):
    text = "Haus Baum\n\nKatze Hund Auto\n"
    p = subprocess.run(
        [sys.executable, "-m", "blocklab", "translate", "--run", str(run_dir), "--beam", "3"],
        input=text,
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout.split("\n")
    assert len(out) == 4 and out[-1] == "" and out[1] == ""  # three lines in, three out; empty stays empty


def test_translate_file_greedy_equals_library(run_dir, tmp_path, capsys):
    from blocklab.inference import translate_lines

    src = tmp_path / "in.txt"
    src.write_text("Haus Baum\nAuto\n")
    assert main(["translate", "--run", str(run_dir), "--input", str(src), "--beam", "1"]) == 0
    assert capsys.readouterr().out.split("\n")[:2] == translate_lines(run_dir, ["Haus Baum", "Auto"], beam=1)


def one_line_error(capsys, argv, *words):
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err.count("\n") == 0, err
    for w in words:
        assert w in err, err


def test_bad_input(run_dir, tmp_path, capsys):
    one_line_error(capsys, ["translate", "--run", tmp_path / "none"], "holds no blocklab run")
    one_line_error(capsys, ["translate", "--run", run_dir, "--input", tmp_path / "missing.txt"], "cannot read")
    bad = tmp_path / "bad.txt"
    bad.write_bytes("gut\nschön\n".encode("latin-1"))
    one_line_error(capsys, ["translate", "--run", run_dir, "--input", bad], "line 2: not valid UTF-8")
    one_line_error(capsys, ["translate", "--run", run_dir, "--beam", "0"], "--beam")
    # a language-model run: one line, before its checkpoint is read
    lm = tmp_path / "lm"
    lm.mkdir()
    config = (run_dir / "config.toml").read_text()
    (lm / "config.toml").write_text(
        config.replace('task = "translation"', 'task = "clm"').replace("label_smoothing = 0.1", "label_smoothing = 0.0")
    )
    one_line_error(capsys, ["translate", "--run", lm], "clm model, not a translation model")
    one_line_error(
        capsys,
        ["train", "--out", tmp_path / "x", "--model.task", "translation", "--model.block", "sas-p"],
        "not offered for task='translation'",
        "post-ln, pre-ln",
    )
    one_line_error(
        capsys,
        ["train", "--out", tmp_path / "y", "--model.task", "translation", "--data.source", tmp_path / "nope.tsv"],
        "does not exist",
    )


def test_step_reads_an_older_checkpoint_and_a_missing_one_is_named(run_dir, tmp_path, capsys):
    from blocklab.inference import load_translation_run, translate_lines

    src = tmp_path / "in.txt"
    src.write_text("Haus Baum\nAuto\n")
    assert main(["translate", "--run", str(run_dir), "--input", str(src), "--beam", "1", "--step", "6"]) == 0
    older = load_translation_run(run_dir, step=6)
    assert capsys.readouterr().out.split("\n")[:2] == translate_lines(older, ["Haus Baum", "Auto"], beam=1)
    latest = load_translation_run(run_dir)[0].state_dict()
    assert any(not v.equal(latest[k]) for k, v in older[0].state_dict().items())
    one_line_error(capsys, ["translate", "--run", run_dir, "--step", "7"], "no checkpoint of step 7; it has: 6, 12")


def test_a_cut_latest_pointer_falls_back_and_says_so(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "checkpoints" / "latest").write_text("step-0000")
    src = tmp_path / "in.txt"
    src.write_text("Haus\n")
    assert main(["translate", "--run", str(run), "--input", str(src), "--beam", "1"]) == 0
    out, err = capsys.readouterr()
    fallback = [line for line in err.splitlines() if "latest is damaged" in line]  # (and maybe a line on empty output)
    assert len(fallback) == 1 and "using the checkpoint of step 12" in fallback[0]


def test_a_full_disk_behind_standard_output_is_one_line(run_dir, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("Haus\n" * 50)
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        rc = main(["translate", "--run", str(run_dir), "--input", str(src), "--beam", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "No space left on device" in err and "\n" not in err


def test_empty_translations_of_sentences_are_said_on_stderr(run_dir, tmp_path, capsys, monkeypatch):
    import blocklab.inference as inference

    # A model that ends every sentence at once: its translations are empty lines.
    monkeypatch.setattr(inference, "translate_lines", lambda loaded, lines, *a: ["" for _ in lines])
    src = tmp_path / "in.txt"
    src.write_text("Haus Baum\n\nAuto\n")
    assert main(["translate", "--run", str(run_dir), "--input", str(src)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "\n\n\n"
    assert "2 of 2 translations are empty" in captured.err and "more training" in captured.err
