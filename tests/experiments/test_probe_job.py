"""experiments/probe_job.py: the sweep's init probes in a process of their own, beside the report."""

from __future__ import annotations

import pytest

from blocklab.errors import UserError
from blocklab.experiments.sweep import build_sweep

PROBES = {
    "blocks": "pre-ln",
    "depths": "1",
    "d-model": 16,
    "n-heads": 2,
    "d-ff": 32,
    "seq-len": 8,
    "batch-size": 2,
    "vocab-size": 64,
    "seeds": 1,
    "batches": 1,
    "data": "random",
}


def _sweep(probes=PROBES):
    return build_sweep({"name": "t", "grid": {"model.block": ["pre-ln"]}, "probes": probes})


def test_args_name_the_sweeps_data_when_the_probes_name_none(tmp_path):
    from blocklab.experiments.probe_job import probe_args

    no_data = {k: v for k, v in PROBES.items() if k != "data"}
    sweep = build_sweep(
        {"name": "t", "base": {"data": {"source": "stdlib"}}, "grid": {"model.block": ["pre-ln"]}, "probes": no_data}
    )
    args = probe_args(sweep, tmp_path)
    assert args[:2] == ["--out", str(tmp_path / "probes")]
    assert args[-2:] == ["--data", "stdlib"]
    assert probe_args(_sweep(), tmp_path)[-2:] == ["--data", "random"]  # the probes' own choice is kept


def test_nothing_to_do_without_probes_or_with_probes_kept(tmp_path):
    from blocklab.experiments.probe_job import start_probes

    logged = []
    job = start_probes(build_sweep({"name": "t", "grid": {"model.block": ["pre-ln"]}}), tmp_path, logged.append)
    job.wait()
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "probes.json").write_text("{}")
    kept = start_probes(_sweep(), tmp_path, logged.append)
    kept.wait()
    kept.stop()
    assert logged == [] and (tmp_path / "probes" / "probes.json").read_text() == "{}"


@pytest.mark.slow
def test_start_returns_at_once_and_wait_gives_the_probes(tmp_path):
    from blocklab.experiments.probe_job import start_probes

    logged = []
    job = start_probes(_sweep(), tmp_path, logged.append)
    try:
        assert job._proc.poll() is None  # still importing torch: compare goes on to the report meanwhile
        assert not (tmp_path / "probes" / "probes.json").exists()
        job.wait()
    finally:
        job.stop()
    assert (tmp_path / "probes" / "probes.json").is_file()
    assert logged[0].startswith("init probes: --blocks pre-ln")
    assert any("probes.json" in line for line in logged[1:])
    job.wait()  # waiting again returns at once, says nothing more
    assert sum("init probes" in line for line in logged) == 1


@pytest.mark.slow
def test_stop_ends_a_running_probe_process(tmp_path):
    from blocklab.experiments.probe_job import start_probes

    job = start_probes(_sweep(), tmp_path, print)
    proc = job._proc
    job.stop()
    assert proc.returncode is not None
    assert not (tmp_path / "probes" / "probes.json").exists()
    job.wait()  # nothing left to wait for


@pytest.mark.slow
def test_a_failure_is_one_line_with_the_probes_reason(tmp_path):
    from blocklab.experiments.probe_job import start_probes

    job = start_probes(_sweep({**PROBES, "d-model": 15}), tmp_path, lambda _: None)
    with pytest.raises(UserError) as e:
        job.wait()
    job.stop()
    assert str(e.value).startswith("the init probes failed: ")
    assert "not divisible by n_heads" in str(e.value)
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


@pytest.mark.slow
def test_run_probes_says_its_options_and_keeps_the_probes_it_wrote(tmp_path):
    from blocklab.experiments import run_probes
    from blocklab.experiments.runner import check_probes

    logged = []
    run_probes(_sweep(), tmp_path, log=logged.append)
    assert (tmp_path / "probes" / "probes.json").is_file()
    assert logged[0] == (
        "init probes: --blocks pre-ln --depths 1 --d-model 16 --n-heads 2 --d-ff 32 --seq-len 8 "
        "--batch-size 2 --vocab-size 64 --seeds 1 --batches 1 --data random"
    )
    assert any("probes.json" in line for line in logged[1:])  # the probe process's own lines, after it ended
    logged.clear()
    run_probes(_sweep(), tmp_path, log=logged.append)  # kept: not run again
    assert logged == []
    # The options the process recorded are the ones a sweep asks for, after the round trip through JSON.
    check_probes(_sweep(), tmp_path, rerun_changed=False)
    with pytest.raises(UserError, match=r"\(batches 1 -> 2\)"):
        check_probes(_sweep({**PROBES, "batches": 2}), tmp_path, rerun_changed=False)
    with pytest.raises(UserError) as e:
        run_probes(_sweep({**PROBES, "depths": "0"}), tmp_path / "bad", log=lambda _: None)
    assert str(e.value).startswith("the init probes failed: --depths: '0' is not a positive integer")
