"""`blocklab export` on trained runs, as a user meets it: AutoTokenizer gives the run's ids and text back,
the pipelines run, the folder loads with trust_remote_code alone in a fresh process, and bad input is one line."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

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


def without_blocklab(script: str, tmp_path) -> subprocess.CompletedProcess:
    """`script` in a Python with torch and transformers but no blocklab: -S skips the site module, so no .pth file
    (blocklab's editable install is one) adds a path, and PYTHONPATH names this environment's site-packages, after
    the PYTHONPATH folders that hold no blocklab (tests/hf/transformers4.sh's transformers 4 is one)."""
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not Path(p, "blocklab").exists()]
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([*ours, sysconfig.get_paths()["purelib"]]),
    }
    probe = "import importlib.util, sys; assert importlib.util.find_spec('blocklab') is None, 'blocklab importable'\n"
    return subprocess.run(
        [sys.executable, "-S", "-c", probe + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,  # a question on the terminal would be answered by end of file, not wait
    )


IDS = [[5, 6, 7, 8, 9, 10], [11, 3, 12, 40, 0, 0]]


@pytest.mark.parametrize("kind", ["clm", "mlm"])
def test_the_folder_runs_with_torch_and_transformers_alone(kind, clm, mlm, tmp_path):
    """Must hold: on a machine without blocklab, trust_remote_code=True loads the folder and gives blocklab's
    logits to 1e-6, and the tokenizer (transformers' own class) loads with no remote code at all."""
    from transformers import AutoTokenizer

    from blocklab.training.generate import load_run

    run, folder = clm if kind == "clm" else mlm
    auto = "AutoModelForCausalLM" if kind == "clm" else "AutoModelForMaskedLM"
    done = without_blocklab(
        f"""
        import json, sys, torch
        from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerFast, {auto}
        tok = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=False)
        plain = PreTrainedTokenizerFast.from_pretrained({str(folder)!r})
        assert isinstance(tok, PreTrainedTokenizerFast) and isinstance(plain, PreTrainedTokenizerFast)
        assert not [m for m in sys.modules if m.startswith("transformers_modules")]  # no code of the folder ran
        ids = [tok({TEXT!r})["input_ids"], plain({TEXT!r})["input_ids"]]
        model = {auto}.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        batch = torch.tensor({IDS!r})
        mask = (batch != 0).long()
        with torch.no_grad():
            out = {{"logits": model(input_ids=batch, attention_mask=mask).logits,
                   "hidden": base(input_ids=batch, attention_mask=mask).last_hidden_state}}
        torch.save(out, {str(tmp_path / "out.pt")!r})
        model.save_pretrained({str(tmp_path / "again")!r})  # transformers copies the folder's code with it
        again = {auto}.from_pretrained({str(tmp_path / "again")!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            assert torch.equal(again(input_ids=batch, attention_mask=mask).logits, out["logits"])
        print(json.dumps({{"ids": ids, "blocklab": sorted(m for m in sys.modules if m.startswith("blocklab"))}}))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["blocklab"] == []
    want_ids = AutoTokenizer.from_pretrained(folder)(TEXT)["input_ids"]  # with blocklab here: the same ids
    assert said["ids"] == [want_ids, want_ids]
    got = torch.load(tmp_path / "out.pt")
    model = load_run(run)[0].eval()
    batch = torch.tensor(IDS)
    mask = (batch != 0).long()
    with torch.no_grad():
        want = model(batch, mask).logits
        hidden = model.encode(batch, mask)[0]
    assert (got["logits"] - want).abs().max().item() <= 1e-6
    assert (got["hidden"] - hidden).abs().max().item() <= 1e-6
    card = (folder / "README.md").read_text()
    assert "trust_remote_code=True" in card and f"{auto}" in card
    assert str(run.parent) not in card and not re.search(r"(^|\s|`)/(tmp|home|root|Users)/", card)


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
    rows = [
        {"sentence1": f"x = {i}", "sentence2": "y" if i % 2 else "z", "label": ["definition", "other"][i % 2]}
        for i in range(48)
    ]
    task.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["finetune", "--run", str(run), "--task", str(task), "--out", str(out), "--epochs", "1", "--no-progress"]
    assert main(args) == 0
    assert export(out, tmp_path / "bad") == 2  # the seeds' parent: one of them is asked for
    assert export(out / "seed-0", tmp_path / "hf") == 0
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf")
    assert model.config.id2label == {0: "definition", 1: "other"}  # the data's labels, not LABEL_0, LABEL_1
    assert model.config.label2id == {"definition": 0, "other": 1}
    summary = json.loads((out / "seed-0" / "summary.json").read_text())
    card = (tmp_path / "hf" / "README.md").read_text()
    assert f"**accuracy** on the validation split of `pairs`: **{summary['final_score']:.2f}** (percent" in card
    assert "`definition`, `other`" in card and f"starts from the masked language model `{run.name}`" in card
    assert str(tmp_path) not in card and str(run.parent) not in card  # no local path: names only
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


def digests(folder) -> dict[str, str]:
    """{path under folder: sha256 of its bytes} of every file: what a byte-for-byte comparison needs."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def test_overwrite_replaces_an_earlier_export_and_nothing_else(clm, tmp_path, capsys):
    """Must hold: --overwrite onto a folder holding another run and a notes file, or onto a training run's folder,
    is refused in one line naming what is there, and every file survives byte for byte."""
    run, _ = clm
    shared = tmp_path / "otherruns"
    shutil.copytree(run, shared / "run")  # another training run, checkpoints included
    (shared / "notes.txt").write_text("what I tried\n")
    other = shutil.copytree(run, tmp_path / "a-run")  # --out is itself a training run
    for out, named in ((shared, ["notes.txt", "run/"]), (other, ["a blocklab run (config.toml)", "checkpoints/"])):
        before = digests(out)
        capsys.readouterr()
        assert export(run, out, "--overwrite") == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert all(n in line for n in named) and "replaces only an earlier export" in line, line
        assert digests(out) == before and not list(tmp_path.glob(f".{out.name}.export-*"))
    hf = tmp_path / "hf"
    assert export(run, hf) == 0 and export(run, hf, "--overwrite") == 0  # an earlier export: replaced
    (hf / "mine.txt").write_text("x")  # a file no export wrote: the folder is no longer only an export
    before = digests(hf)
    assert export(run, hf, "--overwrite") == 2 and "mine.txt" in capsys.readouterr().err
    assert digests(hf) == before
    (tmp_path / "empty").mkdir()
    assert export(run, tmp_path / "empty") == 0  # an empty folder needs no --overwrite


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


def test_the_feature_extraction_pipeline_runs_on_an_mlm_export(mlm):
    from transformers import AutoModel, AutoTokenizer, pipeline

    import blocklab.hf  # noqa: F401
    from blocklab.training.generate import load_run

    run, folder = mlm
    tok = AutoTokenizer.from_pretrained(folder)
    features = pipeline("feature-extraction", model=AutoModel.from_pretrained(folder), tokenizer=tok)("import os\n")
    ids = tok("import os\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        want = load_run(run).model.encode(ids)[0]
    torch.testing.assert_close(torch.tensor(features), want)
