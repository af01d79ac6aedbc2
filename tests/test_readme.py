"""The README's first-hour examples run as written (at a tiny size): a new block in one file trains, and the
sweep file is a valid sweep."""

import re
from pathlib import Path

from blocklab.experiments.sweep import load_sweep
from blocklab.registry import REGISTRY, unregister

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_the_one_file_block_registers_and_trains(tmp_path, corpus_dir, monkeypatch):
    code = next(b for b in blocks("python") if "@register(" in b)
    tiny = (
        '{"model": {"block": "my-block", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32}, '
        f'"data": {{"source": "{corpus_dir}", "vocab_size": 512, "seq_len": 16}}, '
        '"train": {"steps": 4, "batch_size": 2, "eval_batches": 1, "checkpoint_every": 4, "log_every": 1}}'
    )
    code, n = re.subn(r"^cfg = load_config\(.*\)$", f"cfg = load_config(None, {tiny})", code, flags=re.M)
    assert n == 1, "the README's load_config call changed: update this test's tiny settings"
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
        assert REGISTRY["my-block"].label == "My block"
        assert (tmp_path / "runs" / "my-block" / "summary.json").is_file()
    finally:
        if "my-block" in REGISTRY:
            unregister("my-block")


def test_the_sweep_file_is_a_valid_tuned_sweep(tmp_path):
    text = next(b for b in blocks("toml") if 'name = "mine"' in b)
    path = tmp_path / "my-sweep.toml"
    path.write_text(text)
    sweep = load_sweep(str(path))
    # two groups over three rates on two tuning seeds, then five final seeds each
    assert [g.name for g in sweep.groups] == ["pre-ln", "sas-p"] and sweep.n_runs == 2 * 3 * 2 + 2 * 5
