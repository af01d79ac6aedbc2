"""`blocklab eval`: the harness's bits per byte on the shipped validation task agrees with blocklab's own
rolling computation, the code tasks score, results are reused only for the same settings, and bad input
(an mlm run, an unknown task, a harness task without its data offline) is one line."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from blocklab.cli import main
from blocklab.cli.eval import SHIPPED_TASKS

TINY = ["--no-progress", "--model.d_model", "16", "--model.n_layers", "1", "--model.n_heads", "2"]
TINY += ["--model.d_ff", "32", "--data.vocab_size", "300", "--data.seq_len", "32", "--train.batch_size", "4"]
TINY += ["--train.steps", "6", "--train.lr", "1e-2", "--data.task_pool_mb", "0.3"]


# blocklab.hf imports transformers (the hf extra); the harness is the eval extra's lm-eval.
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")


class ByteTokenizer:
    """A tokenizer with the `tokenizers` interface: one id per UTF-8 byte."""

    class Encoding:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text, add_special_tokens=False):
        return self.Encoding(list(text.encode("utf-8")))


# --- the rolling windows and the task documents: no training, no harness ---------------------------------


@needs_hf
@pytest.mark.parametrize("max_len", [1, 2, 3, 5, 8, 16])
def test_rolling_windows_predict_every_token_exactly_once_from_at_most_a_window(max_len):
    from blocklab.hf.perplexity import rolling_windows

    for n in range(0, 60):
        predicted = []
        for start, end, k in rolling_windows(n, max_len):
            assert 1 <= k <= end - start <= max_len  # the call reads at most a window, and scores its last k
            assert end - start == min(max_len, end)  # as much context as the window holds
            predicted += range(end - k, end)  # output j of the call predicts token start + j
        assert predicted == list(range(n))


@needs_hf
@pytest.mark.parametrize("max_len", [1, 4, 7])
def test_rolling_windows_are_those_the_harness_defines(max_len):
    utils = pytest.importorskip("lm_eval.utils")
    from blocklab.hf.perplexity import rolling_windows

    for n in range(1, 30):
        tokens = list(range(10, 10 + n))
        seq = [-1, *tokens]  # -1: the prefix token
        ours = [(seq[s:e], tokens[e - k : e]) for s, e, k in rolling_windows(n, max_len)]
        theirs = []
        for context, continuation in map(
            utils.make_disjoint_window, utils.get_rolling_token_windows(tokens, -1, max_len, 1)
        ):
            theirs.append(((context + continuation)[-(max_len + 1) :][:-1], continuation))  # HFLM's model input
        assert ours == theirs


@needs_hf
def test_a_documents_rolling_loglikelihood_is_the_sum_over_its_tokens():
    from blocklab import build_model
    from blocklab.hf.perplexity import document_loglikelihood
    from blocklab.tokens import EOD_ID
    from tests.helpers import randomize, small_cfg

    model = randomize(build_model(small_cfg(max_seq_len=24)), scale=0.1).eval()
    ids = torch.randint(3, 97, (40,)).tolist()
    # Within one window it is one forward pass from <eod>; a rolling pass predicts each token once.
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([[EOD_ID, *ids[:23]]])).logits[0].double(), -1)
    direct = float(logp[torch.arange(24), torch.tensor(ids[:24])].sum())
    assert document_loglikelihood(model, ids[:24], 24) == pytest.approx(direct, rel=1e-6)
    rolling = document_loglikelihood(model, ids, 24)
    assert rolling < direct and document_loglikelihood(model, ids, 24, batch_size=1) == pytest.approx(rolling, rel=1e-9)


@needs_hf
def test_a_mutation_pair_is_the_shared_lines_then_each_versions_rest():
    from blocklab.hf.eval_tasks import Window, mutation_doc

    original = "def f(a, b):\n    c = a - b\n    return c\n"
    mutated = "def f(a, b):\n    c = b - a\n    return c\n"
    doc = mutation_doc(original, mutated, "k", Window(ByteTokenizer(), 100))
    assert doc["context"] == "def f(a, b):\n"
    assert doc["choices"][doc["gold"]] == "    c = a - b\n    return c\n"
    assert doc["choices"][1 - doc["gold"]] == "    c = b - a\n    return c\n"
    short = mutation_doc(original, mutated, "k", Window(ByteTokenizer(), 16))  # the shared last line is cut
    assert sorted(short["choices"]) == ["    c = a - b\n", "    c = b - a\n"]
    assert mutation_doc(original, mutated, "k", Window(ByteTokenizer(), 10)) is None  # the change itself does not fit
    golds = {mutation_doc(original, mutated, f"k{i}", Window(ByteTokenizer(), 100))["gold"] for i in range(20)}
    assert golds == {0, 1}  # never always first: a tie scores chance


@needs_hf
def test_a_docstring_goes_back_where_a_docstring_goes():
    import ast

    from blocklab.hf.eval_tasks import docstring_block, split_at_body

    head, indent, body = split_at_body("@dec\ndef f(x,\n      y):\n    # note\n    return x\n")
    assert (head, indent, body) == ("@dec\ndef f(x,\n      y):\n    # note\n", "    ", ["    return x\n"])
    text = head + docstring_block("Add them.\n\nLonger: x and y.", indent) + "".join(body)
    assert ast.get_docstring(ast.parse(text).body[0]) == "Add them.\n\nLonger: x and y."
    assert split_at_body("def f(): pass\n") is None


@needs_hf
def test_the_commands_task_table_is_the_librarys():
    from blocklab.hf.eval_tasks import SHIPPED

    assert SHIPPED_TASKS == SHIPPED


@needs_hf
def test_unknown_task_names_are_one_user_error(tmp_path):
    from blocklab.errors import UserError
    from blocklab.hf.eval_store import parse_tasks
    from blocklab.hf.harness import harness_tasks

    with pytest.raises(UserError, match="unknown blocklab task 'blocklab_nope': blocklab ships blocklab_val_bpb"):
        parse_tasks("blocklab_val_bpb, blocklab_nope")
    assert parse_tasks("b, a,b") == ["a", "b"]
    tasks = pytest.importorskip("lm_eval.tasks")
    manager = tasks.TaskManager(include_path=str(tmp_path), include_defaults=False)
    with pytest.raises(UserError, match="unknown task 'no_such_task': neither one of blocklab's"):
        harness_tasks(manager, ["no_such_task"])


def test_without_lm_eval_the_command_says_which_extra_installs_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # an import of it fails as if it were not installed
    code = main(["eval", "--run", str(tmp_path), "--tasks", "blocklab_val_bpb"])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err == "blocklab eval: error: blocklab eval needs the lm_eval package: pip install 'blocklab[eval]'\n"
    )


NO_TORCH = r"""
import sys
from blocklab.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("heavy:", ",".join(sorted(m for m in ("torch", "transformers", "lm_eval") if m in sys.modules)) or "none")
"""


@pytest.mark.parametrize("argv", [["eval", "--help"], ["eval", "--tasks", "list"]])
def test_help_and_the_task_list_import_no_torch(argv):
    p = subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "heavy: none", p.stdout + p.stderr
    if "list" in argv:
        assert [line.split()[0] for line in p.stdout.splitlines()[:-1]] == list(SHIPPED_TASKS)
    else:
        assert "--limit" in p.stdout and "default: every document" in p.stdout


# --- on trained runs, through the harness ------------------------------------------------------------------


# A validation document that spells the special tokens and holds non-ASCII text: it must be bytes to the
# harness (the exported tokenizer) and to blocklab's own computation alike, and count its UTF-8 bytes.
SPECIAL_TEXT = 'EOD = "<eod>"  # ünïcödé «quotes»\nPAD = "<pad>"\n' * 8


@pytest.fixture(scope="module")
def clm_run(tmp_path_factory, corpus_dir):
    pytest.importorskip("lm_eval")
    pytest.importorskip("transformers")
    from blocklab.data.documents import unit_hash

    d = tmp_path_factory.mktemp("eval")
    shutil.copytree(corpus_dir, d / "corpus")
    name = next(f"special_{i}.py" for i in range(10_000) if unit_hash(f"special_{i}.py") < 0.02)  # in validation
    (d / "corpus" / name).write_text(SPECIAL_TEXT)
    args = ["--data.source", str(d / "corpus"), "--train.checkpoint_every", "3", "--train.keep_checkpoints", "0"]
    assert main(["train", "--out", str(d / "run"), *TINY, *args]) == 0
    return d / "run"


def _cli(capsys, *argv):
    code = main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_the_harness_bits_per_byte_agrees_with_blocklabs_own(clm_run, monkeypatch):
    from torch.utils import collect_env

    from blocklab.hf.evaluation import evaluate
    from blocklab.hf.perplexity import rolling_bits_per_byte

    # The harness's environment report (about ten processes, seconds a task) is not made: nothing keeps it.
    reports = []
    monkeypatch.setattr(collect_env, "get_pretty_env_info", lambda: reports.append(1) or "")
    record = evaluate(clm_run, "blocklab_val_bpb")
    assert not reports
    ours = rolling_bits_per_byte(clm_run)
    theirs = record["results"]["blocklab_val_bpb"]
    assert ours["documents"] == record["n-samples"]["blocklab_val_bpb"]["effective"] >= 2
    data = [
        json.loads(line) for line in (clm_run / "eval" / "tasks" / "blocklab_val_bpb.jsonl").read_text().splitlines()
    ]
    assert SPECIAL_TEXT in [doc["text"] for doc in data]
    assert ours["tokens"] > 10 * 32  # many windows per document: the rolling scheme is what is compared
    assert abs(theirs["bits_per_byte,none"] - ours["bits_per_byte"]) < 1e-5
    assert theirs["byte_perplexity,none"] == pytest.approx(ours["byte_perplexity"], rel=1e-5)
    assert theirs["word_perplexity,none"] == pytest.approx(ours["word_perplexity"], rel=1e-4)
    # What the harness read is the exported folder, of the checkpoint evaluated.
    export = json.loads((clm_run / "hf-export" / "step-6" / "blocklab_export.json").read_text())
    assert record["export"] == str(clm_run / "hf-export" / "step-6") and export["step"] == record["step"] == 6


CODE_TASKS = [n for n in SHIPPED_TASKS if n != "blocklab_val_bpb"]


@pytest.fixture(scope="module")
def code_tasks(clm_run):
    """The shipped code tasks evaluated once (3 documents each): the record, and the task files it wrote."""
    from blocklab.hf.evaluation import evaluate

    return evaluate(clm_run, CODE_TASKS, limit=3)


@pytest.mark.slow
def test_the_code_tasks_score_an_accuracy_over_their_documents(clm_run, code_tasks):
    record = code_tasks
    for name in CODE_TASKS:
        lines = (clm_run / "eval" / "tasks" / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == record["blocklab_tasks"][name]["documents"] >= 1
        assert record["n-samples"][name]["effective"] == min(3, len(lines))
        assert 0.0 <= record["results"][name]["acc,none"] <= 1.0
        docs = [json.loads(line) for line in lines]
        for doc in docs:
            choices = doc.get("choices", doc.get("contexts"))
            assert 0 <= doc["gold"] < len(choices) and len(set(choices)) == len(choices) >= 2
    # The right choice's place is drawn apart from the documents' order: a limit takes both places.
    golds = [json.loads(line)["gold"] for line in (clm_run / "eval/tasks/blocklab_variable_misuse.jsonl").open()]
    assert len(golds) >= 10 and len(set(golds[: len(golds) // 2])) == 2


@pytest.mark.slow
def test_results_are_reused_only_for_the_same_settings(clm_run):
    from blocklab.hf.evaluation import evaluate

    first = evaluate(clm_run, "blocklab_val_bpb", limit=1)
    export = clm_run / "hf-export" / "step-6" / "model.safetensors"
    stamp = export.stat().st_mtime_ns
    again = evaluate(clm_run, "blocklab_val_bpb", limit=1)
    assert not first["reused"] and again["reused"] and again["results"] == first["results"]
    other = evaluate(clm_run, "blocklab_val_bpb", limit=2)
    assert not other["reused"] and other["path"] != first["path"]
    assert export.stat().st_mtime_ns == stamp  # the same checkpoint's export is used again
    stored = json.loads(open(first["path"]).read())
    stored["checkpoint"] = "another"  # as if the run had been trained again into the same step
    open(first["path"], "w").write(json.dumps(stored))
    assert not evaluate(clm_run, "blocklab_val_bpb", limit=1)["reused"]
    older = evaluate(clm_run, "blocklab_val_bpb", limit=1, step=3)
    assert not older["reused"] and older["step"] == 3 and older["results"] != first["results"]
    assert json.loads((clm_run / "hf-export" / "step-3" / "blocklab_export.json").read_text())["step"] == 3


@pytest.mark.slow
def test_the_command_writes_the_results_and_prints_a_table(clm_run, capsys):
    code, out, err = _cli(capsys, "--run", clm_run, "--tasks", "blocklab_val_bpb", "--limit", "3")
    assert code == 0 and "results of step 6:" in err and "(written)" in err  # no other test asks for 3
    path = err.split("results of step 6: ")[1].split(" (written)")[0]
    assert path.startswith(str(clm_run / "eval" / "results-step-6-"))
    stored = json.loads(open(path).read())
    assert (stored["tasks"], stored["limit"]) == (["blocklab_val_bpb"], 3)
    bpb = stored["results"]["blocklab_val_bpb"]["bits_per_byte,none"]
    header, *rows = out.splitlines()
    assert header.split() == ["task", "metric", "value", "stderr", "documents"]
    row = next(r.split() for r in rows if "bits_per_byte" in r)
    assert row[0] == "blocklab_val_bpb" and float(row[2]) == pytest.approx(bpb, rel=1e-5) and row[4] == "3"
    code, out_again, err = _cli(capsys, "--run", clm_run, "--tasks", "blocklab_val_bpb", "--limit", "3")
    assert code == 0 and out_again == out and "(stored earlier with the same settings)" in err


@pytest.mark.slow
def test_a_task_config_file_runs_with_one_progress_line_per_task_and_no_bars(clm_run, code_tasks, tmp_path, capsys):
    """--tasks FILE.yaml (lm-eval's task format, as --help says): a user's own task. Each task says one line as it
    finishes; no progress bar of the harness, datasets or transformers, no `git describe` complaint."""
    # code_tasks wrote the shipped task's config and its data: the user's task is a copy of it
    shipped = clm_run / "eval" / "tasks" / "blocklab_wrong_operator.yaml"
    mine = tmp_path / "my_task.yaml"
    mine.write_text(shipped.read_text().replace("task: blocklab_wrong_operator", "task: my_task"))
    code, out, err = _cli(capsys, "--run", clm_run, "--tasks", f"{mine},blocklab_val_bpb", "--limit", "2")
    assert code == 0 and "my_task" in out and "blocklab_val_bpb" in out
    lines = err.strip().splitlines()
    progress = [line for line in lines if line.startswith("[")]
    assert [line.split(" in ")[0] for line in progress] == [
        f"[1/2] {mine}: 2 documents",
        "[2/2] blocklab_val_bpb: 2 documents",
    ]
    assert all(re.fullmatch(r".* in \d+\.\d s", line) for line in progress)
    assert "\r" not in err and "it/s" not in err and "fatal" not in err and len(lines) < 10, err


@pytest.mark.slow
def test_an_mlm_run_given_a_blocklab_task_is_one_line(tmp_path, corpus_dir, capsys):
    run = tmp_path / "mlm"
    assert main(["train", "--out", str(run), *TINY, "--data.source", str(corpus_dir), "--model.task", "mlm"]) == 0
    capsys.readouterr()
    code, out, err = _cli(capsys, "--run", run, "--tasks", "blocklab_val_bpb")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "is a mlm run; blocklab's tasks (blocklab_val_bpb) score causal language models" in err
    assert not (run / "eval").exists() and not (run / "hf-export").exists()


@pytest.mark.slow
def test_a_harness_task_without_its_data_offline_is_one_line_naming_it(clm_run, tmp_path):
    # A fresh process with an empty Hugging Face cache: whatever this machine has downloaded does not count.
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0")
    argv = ["-m", "blocklab", "eval", "--run", str(clm_run), "--tasks", "hellaswag", "--limit", "1"]
    p = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("blocklab eval: error: lm-eval task 'hellaswag' cannot be loaded") and "offline" in line
