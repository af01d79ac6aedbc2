"""train.trackers: MLflow read back with its own client (its default store, no environment variable), W&B's
offline files and TensorBoard's event files read back, against metrics.jsonl (one metric naming everywhere), the
settings that apply to the run and summary.json; a resume goes on in the same runs; a sweep groups its runs and
logs its report; a missing package or an unknown tracker is one line, and a run that cannot start its tracker
leaves nothing that blocks the same command again."""

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from blocklab.cli import main
from blocklab.errors import ConfigError
from blocklab.settings import applicable, show
from blocklab.training.config import SECTIONS, TrainConfig, load_config, parse_overrides, to_toml
from blocklab.training.trackers import RUN_ARTIFACTS, default_store


def train_args(out, corpus_dir, *extra) -> list[str]:
    args = ["train", "--out", str(out), "--no-progress", "--model.d_model", "16", "--model.n_layers", "1"]
    args += ["--model.n_heads", "2", "--model.d_ff", "32", "--data.source", str(corpus_dir)]
    args += ["--data.vocab_size", "300", "--data.seq_len", "16", "--train.batch_size", "4", "--train.log_every", "1"]
    args += ["--train.eval_every", "5", "--train.lr", "1e-2"]
    return args + list(extra)


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def history(run: Path) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value)]} of metrics.jsonl, every number but the step."""
    out: dict = {}
    for row in rows(run):
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)):
                out.setdefault(k, []).append((row["step"], v))
    return out


def flat_config(run: Path) -> dict:
    """The run's settings that apply to it (no block-only knob of another block), as the trackers record them."""
    cfg = applicable(SECTIONS, load_config(run / "config.toml").to_dict())
    return {f"{s}.{k}": v for s, values in cfg.items() for k, v in values.items()}


@pytest.fixture
def mlflow_client(monkeypatch):
    """MLflow's own client, with no MLflow setting in the environment (MLflow 3's file store would need one)."""
    pytest.importorskip("mlflow")
    for var in [v for v in os.environ if v.startswith("MLFLOW_")]:
        monkeypatch.delenv(var)
    from mlflow.tracking import MlflowClient

    return lambda uri: MlflowClient(tracking_uri=uri)


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    """W&B with nothing configured (so blocklab's offline default applies) and every folder of its own in tmp;
    its service process stopped afterwards."""
    wandb = pytest.importorskip("wandb")
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield wandb
    wandb.teardown()


def wandb_records(path: Path):
    """The records of an offline run's .wandb file: LevelDB's log format (32 KiB blocks of records, each with a
    7-byte header: CRC, length, type FULL=1, FIRST=2, MIDDLE=3, LAST=4) after W&B's own 7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data, pos, buf = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            yield record


def wandb_run(folder: Path) -> dict:
    """An offline run folder's history {metric: [(step, value)]}, config, summary, group and artifact files."""
    (path,) = folder.glob("run-*.wandb")
    out = {"history": {}, "config": {}, "summary": {}, "artifacts": [], "id": None, "group": None}
    for r in wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["id"], out["group"] = r.run.run_id, r.run.run_group
            out["config"].update({u.key: json.loads(u.value_json) for u in r.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "history":
            for item in r.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    out["history"].setdefault(key, []).append((r.history.step.num, json.loads(item.value_json)))
        elif kind == "summary":
            for u in r.summary.update:
                out["summary"][u.key or ".".join(u.nested_key)] = json.loads(u.value_json)
        elif kind == "artifact":
            out["artifacts"] += [c.path for c in r.artifact.manifest.contents]
    return out


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, corpus_dir):
    """One run tracked by TensorBoard and MLflow (its default store: no MLFLOW_* variable), and what it wrote on
    stderr: the tests below only read what it left."""
    pytest.importorskip("mlflow")
    run = tmp_path_factory.mktemp("tracked") / "run"  # the MLflow experiment and run are named after it
    args = ["--train.steps", "10", "--train.trackers", '["tensorboard","mlflow"]', "--model.block", "sas-p"]
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(io.StringIO()) as err:
        for var in [v for v in os.environ if v.startswith("MLFLOW_")]:
            mp.delenv(var)
        code = main(train_args(run, corpus_dir, *args))
    assert code == 0, err.getvalue()
    return run, err.getvalue()


@pytest.mark.slow
def test_mlflow_reads_back_the_metrics_of_metrics_jsonl_with_the_config_and_summary(tracked, mlflow_client):
    run, err = tracked
    assert list((run / "tb").glob("events.out.tfevents.*"))  # TensorBoard still on, beside MLflow
    state = json.loads((run / "trackers.json").read_text())["mlflow"]
    assert state["tracking_uri"] == default_store(run) == f"sqlite:///{run / 'mlflow.db'}"  # in the run
    client = mlflow_client(state["tracking_uri"])
    (found,) = client.search_runs([client.get_experiment_by_name("run").experiment_id])
    assert found.info.run_id == state["run_id"] and found.info.status == "FINISHED"
    assert found.info.run_name == "run"
    expected = history(run)
    assert {"loss", "lr", "tokens_per_s", "eval_loss"} <= set(expected)
    for key, points in expected.items():
        assert [(m.step, m.value) for m in client.get_metric_history(state["run_id"], key)] == points, key
    params = found.data.params
    assert params == {k: show(v) for k, v in flat_config(run).items()}
    assert params["train.trackers"] == '["tensorboard", "mlflow"]' and params["model.beta_ff"] == "None"
    assert not {"model.hc_streams", "model.laurel_rank", "model.n_labels", "train.momentum"} & set(params)
    summary = json.loads((run / "summary.json").read_text())
    assert found.data.metrics["summary/final_loss"] == summary["final_loss"]
    assert found.data.metrics["summary/n_params"] == summary["n_params"]
    assert found.data.tags["summary.status"] == "completed" and found.data.tags["summary.block"] == summary["block"]
    assert {a.path for a in client.list_artifacts(state["run_id"])} == set(RUN_ARTIFACTS)  # the README's list
    stored = run / "mlartifacts" / state["run_id"] / "artifacts" / "metrics.jsonl"  # beside the store
    assert stored.read_bytes() == (run / "metrics.jsonl").read_bytes()
    assert "data: " in err and "mlflow" not in err.lower()  # MLflow says nothing on the run's stderr


@pytest.mark.slow
def test_mlflows_client_and_cli_read_the_run_from_their_default_store_with_no_setting(tracked):
    """Must hold: MLflow's client, in a fresh process in the run's folder with no MLFLOW_* variable (its default
    store is sqlite:///mlflow.db there), reads the run's metrics; so does its command line."""
    run, _ = tracked
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    code = (
        "import json; from mlflow.tracking import MlflowClient; c = MlflowClient(); "
        "(r,) = c.search_runs([c.get_experiment_by_name('run').experiment_id]); "
        "print(json.dumps([(m.step, m.value) for m in c.get_metric_history(r.info.run_id, 'loss')]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [tuple(p) for p in json.loads(done.stdout.strip().splitlines()[-1])] == history(run)["loss"]
    mlflow_cli = Path(sys.executable).parent / "mlflow"
    if mlflow_cli.exists():  # the command line, as a user types it in the run's folder
        done = subprocess.run(
            [str(mlflow_cli), "experiments", "search"], cwd=run, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0 and " run " in f" {done.stdout} ", done.stdout + done.stderr[-2000:]


@pytest.mark.slow
def test_tensorboard_tags_are_the_metrics_jsonl_names(tmp_path, corpus_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert main(train_args(run, corpus_dir, "--train.steps", "6")) == 0
    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0}).Reload()
    expected = history(run)
    assert set(events.Tags()["scalars"]) == set(expected)  # `loss`, as MLflow and W&B have it: no `train/loss`
    for key, points in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in points]
        assert [v for _, v in got] == pytest.approx([v for _, v in points], rel=1e-6)  # TensorBoard keeps float32


@pytest.mark.slow
def test_wandb_offline_files_hold_the_metrics_config_and_summary(tmp_path, corpus_dir, wandb_offline):
    run = tmp_path / "run"
    assert main(train_args(run, corpus_dir, "--train.steps", "10", "--train.trackers", "wandb")) == 0
    assert not (run / "tb").exists()  # tensorboard is a tracker like the others: left out, it writes nothing
    (folder,) = (run / "wandb").glob("offline-run-*")  # offline by default, under the run directory
    got = wandb_run(folder)
    assert got["id"] == json.loads((run / "trackers.json").read_text())["wandb"]["id"] and got["group"] == "run"
    assert got["history"] == history(run)
    assert got["config"] == {**json.loads(json.dumps(flat_config(run))), "_wandb": {}}
    summary = json.loads((run / "summary.json").read_text())
    assert {k: got["summary"][k] for k in ("status", "final_loss", "tokens_per_s", "n_params")} == {
        k: summary[k] for k in ("status", "final_loss", "tokens_per_s", "n_params")
    }  # the summary's steady-state tokens/s, not the last row's: the summary is logged last
    assert sorted(got["artifacts"]) == sorted(RUN_ARTIFACTS)


@pytest.mark.slow
def test_a_resumed_run_goes_on_in_the_same_mlflow_and_wandb_runs(tmp_path, corpus_dir, mlflow_client, wandb_offline):
    run = tmp_path / "run"
    args = train_args(run, corpus_dir, "--train.schedule", "constant", "--train.warmup_steps", "0")
    args += ["--train.trackers", "mlflow,wandb"]
    assert main(args + ["--train.steps", "6"]) == 0
    first = json.loads((run / "trackers.json").read_text())
    assert main(args + ["--train.steps", "10", "--resume"]) == 0
    assert json.loads((run / "trackers.json").read_text()) == first
    client = mlflow_client(first["mlflow"]["tracking_uri"])
    (found,) = client.search_runs([client.get_experiment_by_name("run").experiment_id])
    assert found.info.run_id == first["mlflow"]["run_id"]
    for key, points in history(run).items():  # steps 1..10 once each: nothing logged twice
        assert [(m.step, m.value) for m in client.get_metric_history(found.info.run_id, key)] == points, key
    assert found.data.params["train.steps"] == "6"  # MLflow's parameters never change; config.toml has 10
    # W&B offline keeps each resume in its own folder under the same run id; `wandb sync` joins them.
    parts = [wandb_run(f) for f in sorted((run / "wandb").glob("offline-run-*"))]
    assert [p["id"] for p in parts] == [first["wandb"]["id"]] * 2
    assert [s for p in parts for s, _ in p["history"]["loss"]] == list(range(1, 11))
    assert parts[1]["config"]["train.steps"] == 10


@pytest.mark.slow
def test_a_sweep_groups_its_runs_in_one_experiment_and_logs_its_report(
    tmp_path, overrides, mlflow_client, wandb_offline
):
    lines = ['name = "tracked"', "seeds = [0]", "[base.train]", 'trackers = ["mlflow", "wandb"]', "steps = 6"]
    lines += ["batch_size = 4", "eval_every = 3", "eval_batches = 1", "[base.data]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in overrides["data"].items()]
    lines += ["[base.model]"] + [f"{k} = {json.dumps(v)}" for k, v in overrides["model"].items() if k != "block"]
    for block in ("pre-ln", "sas-p"):
        lines += ["[[runs]]", f'name = "{block}"', f'label = "{block}"', f'"model.block" = "{block}"']
    (tmp_path / "sweep.toml").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(["compare", str(tmp_path / "sweep.toml"), "--out", str(out), "--no-progress", "--jobs", "1"]) == 0
    uri = default_store(out)  # the sweep's one store, written into each run's config
    assert {load_config(p / "config.toml").train.mlflow_uri for p in (out / "runs").iterdir()} == {uri}
    client = mlflow_client(uri)
    found = client.search_runs([client.get_experiment_by_name("tracked").experiment_id])
    assert sorted(r.info.run_name for r in found) == ["pre-ln_s0", "report", "sas-p_s0"]
    (report,) = [r for r in found if r.info.run_name == "report"]
    assert {a.path for a in client.list_artifacts(report.info.run_id)} == {"report.html", "report.md", "verdicts.json"}
    folders = list((out / "runs").glob("*/wandb/offline-run-*")) + list((out / "wandb").glob("offline-run-*"))
    assert sorted(wandb_run(f)["group"] for f in folders) == ["tracked"] * 3
    assert "trackers" not in (out / "report.md").read_text()  # where runs were tracked is no setting of theirs


@pytest.mark.parametrize("name", ["mlflow", "wandb"])
def test_a_missing_package_is_one_line_naming_the_extra(tmp_path, corpus_dir, monkeypatch, capsys, name):
    monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    run = tmp_path / "run"
    assert main(train_args(run, corpus_dir, "--train.steps", "2", "--train.trackers", f"tensorboard,{name}")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"pip install 'blocklab[{name}]'" in line and "train.trackers" in line
    assert not run.exists()  # said before anything was prepared or trained


@pytest.mark.parametrize("package", ["sqlalchemy", "alembic"])
def test_a_database_stores_missing_package_is_one_line_naming_it(tmp_path, corpus_dir, monkeypatch, capsys, package):
    """mlflow-skinny alone cannot open MLflow's database stores (the default one included): the line names the
    package and the extra that brings it, before the run folder is made."""
    pytest.importorskip("mlflow")
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "run"
    assert main(train_args(run, corpus_dir, "--train.steps", "2", "--train.trackers", "mlflow")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"needs the {package} package: pip install 'blocklab[mlflow]'" in line and "sqlite" in line
    assert not run.exists()


@pytest.mark.slow
def test_a_run_whose_tracker_cannot_start_leaves_nothing_and_the_same_command_runs_again(
    tmp_path, corpus_dir, mlflow_client, capsys
):
    run, store = tmp_path / "run", tmp_path / "stores" / "mlflow.db"
    (tmp_path / "stores").write_text("a file where the store's folder should be")
    args = train_args(run, corpus_dir, "--train.steps", "3", "--train.trackers", "mlflow")
    args += ["--train.mlflow_uri", f"sqlite:///{store}"]
    assert main(args) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the run's own lines (data, attention path)
    assert line.startswith(f"blocklab train: error: MLflow at sqlite:///{store}:")
    assert not run.exists()  # no config.toml, tokenizer.json or half a store to refuse the next try
    (existing := tmp_path / "empty").mkdir()  # a folder the user made: kept, and empty as it was
    assert main([*train_args(existing, corpus_dir, *args[len(train_args(run, corpus_dir)) :])]) == 2
    assert existing.is_dir() and not list(existing.iterdir())
    (tmp_path / "stores").unlink()
    assert main(args) == 0  # the same command, once the store can be made
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_an_unknown_tracker_is_a_config_error_naming_the_choices(capsys, tmp_path):
    with pytest.raises(ConfigError, match=r"train.trackers=\['tensorboard', 'neptune'\] is not valid"):
        TrainConfig(trackers=["tensorboard", "neptune"])
    with pytest.raises(ConfigError, match="distinct values among: tensorboard, mlflow, wandb"):
        TrainConfig(trackers=["mlflow", "mlflow"])
    assert main(["train", "--out", str(tmp_path / "r"), "--train.trackers", "neptune"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "train.trackers=['neptune']" in line and "tensorboard, mlflow, wandb" in line


def test_the_list_option_takes_an_array_or_commas_and_round_trips_through_config_toml(tmp_path):
    as_array = parse_overrides(["--train.trackers", '["tensorboard", "mlflow"]'])
    assert (
        as_array
        == parse_overrides(["--train.trackers=tensorboard, mlflow"])
        == {"train": {"trackers": ["tensorboard", "mlflow"]}}
    )
    assert parse_overrides(["--train.trackers", ""]) == {"train": {"trackers": []}}  # no tracker at all
    cfg = load_config(None, as_array)
    (tmp_path / "config.toml").write_text(to_toml(cfg))
    assert load_config(tmp_path / "config.toml").train.trackers == ["tensorboard", "mlflow"]
    assert load_config(None).train.trackers == ["tensorboard"]


@pytest.mark.slow
def test_blocklab_imports_neither_mlflow_nor_wandb():
    code = (
        "import sys, blocklab.cli, blocklab.training.trainer, blocklab.experiments, blocklab.training.trackers\n"
        "print(sorted({'mlflow', 'wandb'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_tracker_that_fails_mid_run_is_said_once_and_the_run_completes(tmp_path, corpus_dir, monkeypatch, capsys):
    from blocklab.training import trackers

    calls = []

    def flaky(self, values, step):  # a tracking server that goes away at step 4
        calls.append(step)
        if step >= 4:
            raise ConnectionError("tracking server unreachable\nmore detail")

    monkeypatch.setattr(trackers.TensorBoard, "log", flaky)
    run = tmp_path / "run"
    assert main(train_args(run, corpus_dir, "--train.steps", "8", "--train.log_every", "2")) == 0
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert calls[-1] == 4 and calls.count(4) == 1  # dropped after its failure, never asked again
    err = capsys.readouterr().err
    assert err.count("warning: TensorBoard failed logging step 4 (tracking server unreachable)") == 1
    assert [r["step"] for r in rows(run) if "loss" in r] == [2, 4, 6, 8]  # metrics.jsonl has every row
