"""run_sweep's check of stored runs: --rerun-changed moves a changed run aside, and the verdicts with it."""

import json

import pytest

from blocklab.errors import UserError
from blocklab.experiments.runner import check_changed
from blocklab.experiments.sweep import RunSpec
from blocklab.training.config import load_config, to_toml


def stored(out, name, lr):
    (out / "runs" / name).mkdir(parents=True)
    (out / "runs" / name / "config.toml").write_text(to_toml(load_config(None, {"train": {"lr": lr}})))


def asked(name, lr):
    return RunSpec(name, name, {}, config=load_config(None, {"train": {"lr": lr}}))


def test_a_changed_run_moves_aside_with_the_verdicts_that_rest_on_it(tmp_path):
    stored(tmp_path, "pre-ln_lr0.001_s0", 1e-3)
    stored(tmp_path, "kept", 1e-3)
    (tmp_path / "verdicts.json").write_text('{"old": true}')
    runs = [asked("pre-ln_lr0.001_s0", 3e-3), asked("kept", 1e-3)]
    with pytest.raises(UserError, match=r"pre-ln_lr0.001_s0 \(train.lr 0.001 -> 0.003\)"):
        check_changed(runs, tmp_path, rerun_changed=False, log=lambda *a: None)
    assert (tmp_path / "verdicts.json").is_file()  # a refusal moves nothing
    (tmp_path / "replaced" / "verdicts.json").parent.mkdir()
    (tmp_path / "replaced" / "verdicts.json").write_text('{"older": true}')  # an earlier move: kept
    check_changed(runs, tmp_path, rerun_changed=True, log=lambda *a: None)
    assert not (tmp_path / "runs" / "pre-ln_lr0.001_s0").exists() and (tmp_path / "runs" / "kept").is_dir()
    assert (tmp_path / "replaced" / "pre-ln_lr0.001_s0" / "config.toml").is_file()
    assert not (tmp_path / "verdicts.json").exists()
    assert json.loads((tmp_path / "replaced" / "verdicts-2.json").read_text()) == {"old": True}
    assert json.loads((tmp_path / "replaced" / "verdicts.json").read_text()) == {"older": True}


PROBES = {"blocks": "pre-ln", "depths": "1", "d-model": 16, "n-heads": 2, "seeds": 1, "data": "random"}


def probes_sweep(**changes):
    from blocklab.experiments.sweep import build_sweep

    return build_sweep({"name": "t", "grid": {"model.block": ["pre-ln"]}, "probes": {**PROBES, **changes}})


def stored_probes(out, options):
    """out/probes/probes.json as `blocklab probe` writes it, with `options` recorded (None: an older file)."""
    settings = {"blocks": ["pre-ln"]} if options is None else {"blocks": ["pre-ln"], "options": options}
    (out / "probes").mkdir(parents=True)
    (out / "probes" / "probes.json").write_text(json.dumps({"schema": "blocklab.probes/1", "settings": settings}))


def options_asked(sweep, out):
    from blocklab.experiments.probe_job import probe_args
    from blocklab.probes.runner import options_of, parse_options

    return json.loads(json.dumps(options_of(parse_options(probe_args(sweep, out)))))  # as probes.json holds them


def test_stored_probes_are_kept_only_when_they_measured_what_the_sweep_asks(tmp_path):
    from blocklab.experiments.runner import check_probes

    logged = []
    check_probes(probes_sweep(), tmp_path, rerun_changed=False, log=logged.append)  # none stored: nothing to say
    stored_probes(tmp_path, options_asked(probes_sweep(), tmp_path))
    check_probes(probes_sweep(), tmp_path, rerun_changed=False, log=logged.append)
    assert logged == [] and (tmp_path / "probes" / "probes.json").is_file()
    with pytest.raises(UserError) as e:
        check_probes(probes_sweep(seeds=3), tmp_path, rerun_changed=False, log=logged.append)
    assert "was measured with other options than the sweep's [probes] (seeds 1 -> 3)" in str(e.value)
    assert "--rerun-changed" in str(e.value) and (tmp_path / "probes" / "probes.json").is_file()
    check_probes(probes_sweep(seeds=3, depths="1,2"), tmp_path, rerun_changed=True, log=logged.append)
    assert not (tmp_path / "probes").exists()
    assert (tmp_path / "replaced" / "probes" / "probes.json").is_file()
    assert logged == [
        f"init probes: options changed (depths '1' -> '1,2', seeds 1 -> 3); the old ones moved to "
        f"{tmp_path / 'replaced' / 'probes'}"
    ]


def test_stored_probes_without_their_options_are_not_taken_for_the_sweeps(tmp_path):
    from blocklab.experiments.runner import check_probes

    stored_probes(tmp_path, None)
    with pytest.raises(UserError, match="it has no record of its options"):
        check_probes(probes_sweep(), tmp_path, rerun_changed=False)
    (tmp_path / "replaced" / "probes").mkdir(parents=True)  # an earlier move is kept
    check_probes(probes_sweep(), tmp_path, rerun_changed=True, log=lambda _: None)
    assert (tmp_path / "replaced" / "probes-2" / "probes.json").is_file()


def test_a_sweep_without_probes_leaves_a_stored_probes_folder_alone(tmp_path):
    from blocklab.experiments.runner import check_probes
    from blocklab.experiments.sweep import build_sweep

    stored_probes(tmp_path, None)
    before = (tmp_path / "probes" / "probes.json").read_bytes()
    check_probes(build_sweep({"name": "t", "grid": {"model.block": ["pre-ln"]}}), tmp_path, rerun_changed=False)
    assert (tmp_path / "probes" / "probes.json").read_bytes() == before and not (tmp_path / "replaced").exists()


def test_a_bad_probes_option_is_one_line_before_any_training(tmp_path):
    from blocklab.experiments.runner import check_probes

    with pytest.raises(UserError) as e:
        check_probes(probes_sweep(bogus=3), tmp_path, rerun_changed=False)  # nothing stored yet
    assert str(e.value) == "[probes]: unrecognized arguments: --bogus 3"
    with pytest.raises(UserError, match=r"^\[probes\]: argument --seeds: invalid int value: 'x'$"):
        check_probes(probes_sweep(seeds="x"), tmp_path, rerun_changed=False)
