"""summary.json's record: the trainer's file reads back and writes back byte for byte, older and newer files stay
readable, damaged ones read as absent, and docs/run-folder.md lists exactly the record's fields."""

import json
import math
import re
from pathlib import Path

import pytest

from blocklab.run_summary import FIELDS, RunSummary, read_summary, write_summary
from blocklab.training.config import load_config
from blocklab.training.trainer import train

DOCS = Path(__file__).resolve().parents[1] / "docs" / "run-folder.md"

# A sweep's diverged run as the trainer and the local launcher write it (fields in the file's order).
DIVERGED = {
    "status": "diverged",
    "step": 18,
    "steps": 150,
    "block": "post-ln",
    "task": "clm",
    "recipe": {},
    "n_params": 366080,
    "initial_loss": 7.31,
    "final_loss": 9.5,
    "final_eval_loss": None,
    "final_eval_se": None,
    "final_eval_batches": None,
    "best_eval_loss": None,
    "tokens": 18432,
    "wall_time_s": 1.5,
    "world_size": 1,
    "device": "cpu",
    "precision": "fp32",
    "compile": False,
    "attn_impl": "sdpa",
    "parallel": None,
    "grad_accum": 1,
    "threads": 1,
    "peak_memory_mb": 809.7,
    "machine": {"cpu": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu", "python": "3.11.7"},
    "tokens_per_s": 12169.0,
    "mfu": 0.49,
    "flops_per_token": 2457600.0,
    "peak_flops_per_s": 6.1e10,
    "compile_s": None,
    "startup_s": 0.01,
    "steady_steps": 15,
    "unigram_eval_loss": 5.93,
    "unigram_entropy": 5.96,
    "diverged_step": 19,
    "diverged_loss": math.nan,
    "launcher": "local",
    "host": "vm",
    "concurrent_runs": 2,
}


def text(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def test_a_written_summary_reads_back_and_writes_back_byte_for_byte(tmp_path):
    (tmp_path / "summary.json").write_text(text(DIVERGED))
    s = read_summary(tmp_path)
    assert s.status == "diverged" and s.diverged_step == 19 and math.isnan(s.diverged_loss) and s.extra == {}
    assert s.final_eval_loss is None and s.concurrent_runs == 2 and s.launcher == "local"
    write_summary(tmp_path / "again", s)
    assert (tmp_path / "again" / "summary.json").read_text() == text(DIVERGED)


def test_a_trained_runs_summary_is_the_record_the_trainer_returns(tmp_path, overrides):
    s = train(load_config(None, overrides), tmp_path / "r", progress=False, log=lambda *a: None)
    written = (tmp_path / "r" / "summary.json").read_text()
    assert read_summary(tmp_path / "r") == s
    assert text(s.to_dict()) == written and list(json.loads(written)) == list(s.to_dict())
    assert s.status == "completed" and s.step == 20 and not s.has("diverged_step") and not s.has("final_bleu")


def test_older_files_read_with_their_missing_fields_as_none_and_unknown_fields_are_kept(tmp_path):
    old = {k: v for k, v in DIVERGED.items() if k not in ("unigram_eval_loss", "final_eval_batches", "launcher")}
    old["from_a_newer_blocklab"] = {"x": 1}
    (tmp_path / "summary.json").write_text(text(old))
    s = read_summary(tmp_path)
    assert s.unigram_eval_loss is None and s.final_eval_batches is None and s.launcher is None
    assert s.extra == {"from_a_newer_blocklab": {"x": 1}}
    back = s.to_dict()
    assert back["from_a_newer_blocklab"] == {"x": 1} and "launcher" not in back and "unigram_eval_loss" not in back


def test_a_field_set_to_null_stays_in_the_file():
    s = RunSummary.from_dict({"status": "completed", "task": "translation"}).with_fields(final_bleu=None)
    assert s.has("final_bleu") and s.to_dict()["final_bleu"] is None and not s.has("best_bleu")


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", "null"])
def test_a_damaged_or_foreign_summary_reads_as_absent(tmp_path, content):
    (tmp_path / "summary.json").write_text(content)
    assert read_summary(tmp_path) is None
    assert read_summary(tmp_path / "nowhere") is None


def test_the_run_folder_docs_list_exactly_the_records_fields():
    doc = DOCS.read_text()
    table = doc[doc.index("## summary.json") :]
    table = table[: table.index("\n## ")]
    documented = {name for row in table.splitlines() if row.startswith("| `") for name in _first_cell(row)}
    assert documented == {f.name for f in FIELDS}


def _first_cell(row: str) -> list[str]:
    return re.findall(r"`(\w+)`", row.split("|")[1])
