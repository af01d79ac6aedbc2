"""A run's residual-stream probes (experiments/stream_probes.py): its own initial model (the trainer's, rebuilt
from the seed), its last checkpoint, one stored result reused only for the same settings and step."""

import copy
import json

from blocklab import build_model
from blocklab.experiments.stream_probes import FILE, probe_ids, probe_run, run_stream_probes
from blocklab.experiments.sweep import RunSpec
from blocklab.probes.stream import stream_measures
from blocklab.training.config import load_config
from blocklab.training.generate import load_run
from blocklab.training.trainer import Trainer


def quiet(*a, **k):
    pass


def test_probe_run_measures_the_runs_initial_model_and_its_checkpoint(tmp_path, overrides):
    overrides["model"]["block"] = "laurel"
    overrides["train"].update(steps=10, checkpoint_every=10, eval_every=10)
    cfg = load_config(None, overrides)
    trainer = Trainer(cfg, tmp_path / "r", progress=False, log=quiet)
    initial = copy.deepcopy(trainer.model.state_dict())
    trainer.run()

    result = probe_run(tmp_path / "r")
    ids = probe_ids(cfg.data)
    assert ids.shape == (8, 32)
    model = build_model(cfg.model)
    model.load_state_dict(initial)
    assert result["init"] == stream_measures(model, ids)
    assert result["final"] == stream_measures(load_run(tmp_path / "r")[0], ids)
    assert result["init"]["low_rank_ratio"] == [0.0] * 4  # LAuReL's B = 0 at init
    assert all(r > 0 for r in result["final"]["low_rank_ratio"])
    assert (result["block"], result["n_layers"], result["step"]) == ("laurel", 2, 10)
    assert json.loads((tmp_path / "r" / FILE).read_text()) == result

    # kept for the same settings and step; measured again when they differ
    stored = tmp_path / "r" / FILE
    before = stored.stat().st_mtime_ns
    assert probe_run(tmp_path / "r") == result and stored.stat().st_mtime_ns == before
    stored.write_text(json.dumps({**result, "fingerprint": "other", "final": {}}))
    assert probe_run(tmp_path / "r")["final"] == result["final"]


def test_a_sweep_measures_its_stream_runs_and_pre_ln_beside_them_only(tmp_path, overrides):
    overrides["train"].update(steps=4, checkpoint_every=4, eval_every=4)
    specs = []
    for block in ("pre-ln", "value-residual"):
        over = copy.deepcopy(overrides)
        over["model"]["block"] = block
        cfg = load_config(None, over)
        Trainer(cfg, tmp_path / "runs" / block, progress=False, log=quiet).run()
        specs.append(RunSpec(block, block, {}, config=cfg))
    assert run_stream_probes(specs[:1], tmp_path, quiet) == 0  # Pre-LN alone: nothing to set it beside
    assert not (tmp_path / "runs" / "pre-ln" / FILE).exists()
    lines = []
    unresolved = RunSpec("later", "later", {})  # a final run whose config is not resolved yet: passed over
    assert run_stream_probes([unresolved] + specs, tmp_path, lines.append) == 2
    assert "2 final run(s)" in lines[-1]
    vr = json.loads((tmp_path / "runs" / "value-residual" / FILE).read_text())
    assert vr["final"]["value_lambdas"] == [None, [0.5, 0.5]]
    assert "value_lambdas" not in json.loads((tmp_path / "runs" / "pre-ln" / FILE).read_text())["final"]


def test_a_sweep_with_gated_attention_measures_the_gated_runs_and_pre_ln(tmp_path, overrides):
    """Gated attention's comparison: the gated run and Pre-LN are measured (the sink with and without the gate),
    Post-LN is not; a sweep of Pre-LN and Post-LN alone measures nothing."""
    overrides["train"].update(steps=4, checkpoint_every=4, eval_every=4)
    specs = {}
    for name, block, gate in (("pre-ln", "pre-ln", False), ("gate", "pre-ln", True), ("post-ln", "post-ln", False)):
        over = copy.deepcopy(overrides)
        over["model"].update(block=block, attn_gate=gate)
        cfg = load_config(None, over)
        Trainer(cfg, tmp_path / "runs" / name, progress=False, log=quiet).run()
        specs[name] = RunSpec(name, name, {}, config=cfg)
    assert run_stream_probes([specs["pre-ln"], specs["post-ln"]], tmp_path, quiet) == 0
    assert run_stream_probes(list(specs.values()), tmp_path, quiet) == 2
    assert not (tmp_path / "runs" / "post-ln" / FILE).exists()
    gated = json.loads((tmp_path / "runs" / "gate" / FILE).read_text())
    plain = json.loads((tmp_path / "runs" / "pre-ln" / FILE).read_text())
    for moment in ("init", "final"):
        assert len(gated[moment]["attention"]["gate_mean"]) == 2
        assert "gate_mean" not in plain[moment]["attention"]
        assert len(plain[moment]["attention"]["first_token_mass"]) == 2
