"""`blocklab export` on trained runs, as a user meets it: AutoTokenizer gives the run's ids and text back,
the pipelines run, the folder loads with trust_remote_code alone in a fresh process, and bad input is one line."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from blocklab.cli import main

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TINY = ["--no-progress", "--model.d_model", "16", "--model.n_layers", "1", "--model.n_heads", "2"]
TINY += ["--model.d_ff", "32", "--data.vocab_size", "300", "--data.seq_len", "16", "--train.batch_size", "4"]
TEXT = "def f(x):\n\treturn '<eod>' + x  # ünïcödé, «quotes» and <pad>\r\n"


def train(out, corpus_dir, *extra):
    args = ["train", "--out", str(out), *TINY, "--data.source", str(corpus_dir), "--train.steps", "6"]
    assert main([*args, "--train.lr", "1e-2", *extra]) == 0
    return out


def export(run, out, *extra):
    return main(["export", "--run", str(run), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def clm(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("export")
    run = train(d / "run", corpus_dir, "--train.checkpoint_every", "3", "--train.keep_checkpoints", "0")
    assert export(run, d / "hf") == 0
    return run, d / "hf"


@pytest.fixture(scope="module")
def mlm(tmp_path_factory, corpus_dir):
    d = tmp_path_factory.mktemp("export-mlm")
    run = train(d / "run", corpus_dir, "--model.task", "mlm")
    assert export(run, d / "hf") == 0
    return run, d / "hf"


def test_the_tokenizer_gives_the_runs_ids_and_the_exact_text_back(clm):
    from transformers import AutoTokenizer

    from blocklab.data.tokenizer import load_tokenizer

    run, folder = clm
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(TEXT)["input_ids"]
    assert ids == load_tokenizer(run / "tokenizer.json").encode(TEXT, add_special_tokens=False).ids
    assert tok.decode(ids) == TEXT
    assert (tok.eos_token_id, tok.pad_token_id, tok.mask_token_id) == (2, 0, 1)


def test_the_text_generation_pipeline_gives_blocklab_generates_text(clm, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    import blocklab.hf  # noqa: F401  (registers the Auto classes)

    run, folder = clm
    generator = pipeline(
        "text-generation",
        model=AutoModelForCausalLM.from_pretrained(folder),
        tokenizer=AutoTokenizer.from_pretrained(folder),
    )
    got = generator("def ", max_new_tokens=20, do_sample=False)[0]["generated_text"]
    capsys.readouterr()
    assert (
        main(["generate", "--run", str(run), "--prompt", "def ", "--max-new-tokens", "20", "--temperature", "0"]) == 0
    )
    assert capsys.readouterr().out == got + "\n"


def test_the_folder_loads_with_trust_remote_code_alone_and_saves_again(clm, tmp_path):
    run, folder = clm
    script = textwrap.dedent(f"""
        import sys, torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True)
        assert "blocklab.hf" in sys.modules  # through the folder's own modules
        model.save_pretrained({str(tmp_path / "again")!r})
        again = AutoModelForCausalLM.from_pretrained({str(tmp_path / "again")!r}, trust_remote_code=True)
        ids = torch.tensor([[5, 6, 7, 8]])
        print(torch.equal(model(ids).logits, again(ids).logits), model(ids).logits.sum().item())
    """)
    probe = "import sys, transformers; assert 'blocklab' not in sys.modules; "
    done = subprocess.run([sys.executable, "-c", probe + script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    same, total = done.stdout.split()
    assert same == "True"
    from blocklab.training.generate import load_run

    model = load_run(run)[0]
    assert float(total) == pytest.approx(model(torch.tensor([[5, 6, 7, 8]])).logits.sum().item(), rel=1e-6)
    card = (folder / "README.md").read_text()
    assert "pip install 'blocklab[hf]'" in card and "AutoModelForCausalLM" in card


def test_step_exports_an_older_checkpoint(clm, tmp_path):
    run, _ = clm
    assert export(run, tmp_path / "hf3", "--step", "3") == 0
    info = json.loads((tmp_path / "hf3" / "blocklab_export.json").read_text())
    assert info["step"] == 3 and info["task"] == "clm"


def test_fill_mask_runs_on_an_mlm_export_with_blocklabs_probabilities(mlm):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    import blocklab.hf  # noqa: F401
    from blocklab.training.generate import load_run

    run, folder = mlm
    tok = AutoTokenizer.from_pretrained(folder)
    fill = pipeline("fill-mask", model=AutoModelForMaskedLM.from_pretrained(folder), tokenizer=tok, top_k=1)
    best = fill("import <mask>\n")[0]
    ids = tok("import <mask>\n", return_tensors="pt")["input_ids"]
    assert (ids == 1).sum() == 1  # "<mask>" in the text is the mask token
    with torch.no_grad():
        probs = load_run(run)[0](ids).logits[0, (ids[0] == 1).nonzero()[0, 0]].softmax(-1)
    assert best["token"] == int(probs.argmax()) and best["score"] == pytest.approx(float(probs.max()), rel=1e-5)


def test_a_finetuned_run_exports_as_a_sequence_classifier(mlm, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import blocklab.hf  # noqa: F401
    from blocklab.data.labelled_batches import encode_examples
    from blocklab.data.tokenizer import load_tokenizer
    from blocklab.training.generate import load_run

    run, _ = mlm
    out, task = tmp_path / "ft", tmp_path / "pairs.jsonl"
    rows = [{"sentence1": f"x = {i}", "sentence2": "y" if i % 2 else "z", "label": i % 2} for i in range(48)]
    task.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["finetune", "--run", str(run), "--task", str(task), "--out", str(out), "--epochs", "1", "--no-progress"]
    assert main(args) == 0
    assert export(out, tmp_path / "bad") == 2  # the seeds' parent: one of them is asked for
    assert export(out / "seed-0", tmp_path / "hf") == 0
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    got = tok("x = a + b", "y")["input_ids"]

    class E:  # an Example's fields that encode_examples reads
        text, text_pair, label, group, doc = "x = a + b", "y", 0, None, "d"

    want = encode_examples(load_tokenizer(run / "tokenizer.json"), [E()], 16, regression=False).ids[0].tolist()
    assert got == want  # <eod> text <eod> pair, as fine-tuning saw it
    blocklab_model = load_run(out / "seed-0")[0]
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=torch.tensor([got])).logits, blocklab_model(torch.tensor([got])).logits
        )


def test_bad_input_is_one_line(clm, tmp_path, capsys, monkeypatch):
    run, folder = clm
    capsys.readouterr()
    assert export(run, folder) == 2  # not empty
    assert "--overwrite" in capsys.readouterr().err
    assert export(run, folder, "--overwrite") == 0
    assert export(tmp_path / "nothing", tmp_path / "x") == 2
    assert export(run, tmp_path / "y", "--step", "4") == 2
    translation = tmp_path / "translation"
    translation.mkdir()
    cfg = (run / "config.toml").read_text().replace('task = "clm"', 'task = "translation"')
    assert cfg != (run / "config.toml").read_text()
    (translation / "config.toml").write_text(cfg)
    capsys.readouterr()
    assert export(translation, tmp_path / "z") == 2
    err = capsys.readouterr().err
    assert "translation run" in err and len(err.strip().splitlines()) == 1
    for inside in (run, run.parent):  # --overwrite never deletes the run it exports
        assert export(run, inside, "--overwrite") == 2
        assert "holds the run" in capsys.readouterr().err and (run / "config.toml").is_file()
    (tmp_path / "file").write_text("x")
    assert export(run, tmp_path / "file", "--overwrite") == 2 and (tmp_path / "file").read_text() == "x"
    assert "not a folder" in capsys.readouterr().err
    assert export(run, tmp_path / "file" / "hf") == 2  # a file where its folder should be: before any work
    assert "is a file" in capsys.readouterr().err
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask  # as any folder made here, readable as the umask allows
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert export(run, tmp_path / "w") == 2
    err = capsys.readouterr().err
    assert "pip install 'blocklab[hf]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists() and not list(tmp_path.glob(".w.export-*"))
