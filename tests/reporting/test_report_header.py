"""The report's header names the machine the runs trained on (their summary.json), not the one drawing it."""

import json

from blocklab.reporting.report import _meta, machine_description
from blocklab.reporting.runs import load_runs
from tests.reporting.fakes import write_run

H100 = {"cpu": "Intel Xeon", "cpu_count": 16, "torch": "2.11.0+cu130", "python": "3.12.3", "gpu": "NVIDIA H100"}


def _with_machine(path, machine):
    s = json.loads((path / "summary.json").read_text())
    (path / "summary.json").write_text(json.dumps(s | {"machine": machine}))


def test_machine_and_software_come_from_the_runs(tmp_path):
    for seed in (0, 1):
        _with_machine(write_run(tmp_path / f"r{seed}", "pre-ln", 0.01, last_step=200, seed=seed), H100)
    meta = dict(_meta(tmp_path, load_runs(tmp_path)[0], {}))
    assert meta["Machine"] == "NVIDIA H100; host Intel Xeon (16 logical CPUs)"
    assert meta["Software"] == "torch 2.11.0+cu130, Python 3.12.3"
    assert meta["Report drawn on"].startswith(machine_description())


def test_runs_without_a_machine_say_the_header_is_this_machines(tmp_path):
    write_run(tmp_path / "a", "pre-ln", 0.01, last_step=200)
    _with_machine(write_run(tmp_path / "b", "pre-ln", 0.01, last_step=200, seed=1), H100)
    meta = dict(_meta(tmp_path, load_runs(tmp_path)[0], {}))
    assert meta["Machine"].endswith("(1 of 2 runs did not record theirs)")
    old = tmp_path / "old"
    write_run(old / "a", "pre-ln", 0.01, last_step=200)
    meta = dict(_meta(old, load_runs(old)[0], {}))
    assert meta["Machine"] == f"{machine_description()} (this report's; the runs did not record theirs)"
