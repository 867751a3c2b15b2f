"""`--log tensorboard|wandb`: every per-update metric of every run, read back from TensorBoard's
event files and W&B's offline run files, equals `metrics.parquet`; each run is described by its
algorithm, task, lag, hyper-parameters and seed; a resumed run or sweep logs each update once;
an overwrite removes what the trackers wrote."""

import json
import struct
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import wandb
from tensorboardX.proto import event_pb2, plugin_hparams_pb2
from wandb.proto import wandb_internal_pb2

from engine_configs import TOY_EXPERIMENT
from vaco_jax import cli
from vaco_jax.infra.faults import FAULT_ENV
from vaco_jax.experiment import load_sweep
from vaco_jax.infra import manifest

TRAIN = ["train", "--env", "toy_reach", "--algo", "ppo", "--seeds", "2", "--total-steps", "512",
         "--num-envs", "8", "--rollout-length", "16", "--epochs", "1", "--minibatches", "1",
         "--episode-length", "40", "--eval-every", "2", "--num-eval-envs", "4",
         "--actor-hidden", "8", "--critic-hidden", "8", "--chunk-periods", "1", "--no-progress"]
"""4 updates in 2 chunks; the evaluation every other update leaves NaN that is not logged."""
Logged = dict[tuple[str, int], float]


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    """W&B offline, without an account or the network, its settings and caches in `tmp_path`;
    the process's W&B state is torn down afterwards (W&B reads its environment once)."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                        "WANDB_PROJECT": "vaco_jax_tests"}.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home" / name))
    yield
    wandb.teardown()


def events(folder: Path) -> list:
    """Every event of the TFRecord event files in `folder`, in order."""
    found = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            found.append(event_pb2.Event.FromString(data[offset + 12:offset + 12 + length]))
            offset += 12 + length + 4  # length, its CRC, the record, its CRC
    return found


def scalars(folder: Path) -> Logged:
    """(tag, step) -> value of every scalar in `folder`'s event files, each logged once."""
    logged = [((v.tag, e.step), v.simple_value) for e in events(folder) for v in e.summary.value
              if v.HasField("simple_value")]
    assert max(Counter(key for key, _ in logged).values()) == 1, "an update was logged twice"
    return dict(logged)


def hparams_session(folder: Path) -> dict:
    """The run's columns in TensorBoard's HParams dashboard (its session start info)."""
    for event in events(folder):
        for value in event.summary.value:
            if value.tag == "_hparams_/session_start_info":
                data = plugin_hparams_pb2.HParamsPluginData.FromString(
                    value.metadata.plugin_data.content)
                return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                        for k, v in data.session_start_info.hparams.items()}
    raise AssertionError(f"no HParams session in {folder}")


def wandb_records(path: Path):
    """The records of a W&B run file: a 7-byte header, then LevelDB-log records in 32 KiB
    blocks (checksum, length, type: full, or first/middle/last pieces of one)."""
    data, offset, pieces = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while offset + 7 <= len(data):
        if 32768 - offset % 32768 < 7:  # a block's tail too short for a header is padding
            offset += 32768 - offset % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        pieces += data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # full, last
            yield wandb_internal_pb2.Record.FromString(pieces)
            pieces = b""


def wandb_runs(out: Path) -> dict[str, dict]:
    """Per W&B run name, from the offline run files under `out/wandb` (the sessions of a
    resumed run together): its ids, project, group, tags, config, exit codes and history."""
    wandb.teardown()  # a finished run's file is complete once W&B's service process has exited
    runs = {}
    for path in sorted((out / "wandb").glob("offline-run-*/run-*.wandb")):
        session = {"history": [], "exit": []}
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                session["run"] = record.run
            elif kind == "history":
                session["history"] += [
                    (("/".join(item.nested_key) or item.key, record.history.step.num),
                     json.loads(item.value_json)) for item in record.history.item]
            elif kind == "exit":
                session["exit"].append(record.exit.exit_code)
        run = session["run"]
        entry = runs.setdefault(run.display_name, {"ids": set(), "exit": [], "history": []})
        entry["ids"].add(run.run_id)
        entry.update(project=run.project, group=run.run_group, tags=list(run.tags),
                     config={i.key: json.loads(i.value_json) for i in run.config.update})
        entry["exit"] += session["exit"]
        entry["history"] += [(k, v) for k, v in session["history"] if not k[0].startswith("_")]
    for entry in runs.values():
        assert max(Counter(k for k, _ in entry["history"]).values()) == 1, "logged twice"
        entry["history"] = dict(entry["history"])
    return runs


def expected(rows: pd.DataFrame) -> Logged:
    """(metric, update) -> value of one run's rows of a metrics table, the finite ones."""
    metrics = [c for c in rows.columns if c not in ("run", "seed", "update")]
    return {(name, int(update)): float(value) for name in metrics
            for update, value in zip(rows["update"], rows[name]) if np.isfinite(value)}


def assert_logged(logged: Logged, rows: pd.DataFrame) -> None:
    want = expected(rows)
    assert logged.keys() == want.keys()
    np.testing.assert_allclose([logged[k] for k in want], list(want.values()), rtol=1e-6)


def test_tensorboard_and_wandb_at_once_log_every_metric_of_every_seed(tmp_path, offline_wandb):
    out = tmp_path / "toy-ppo"
    assert cli.main([*TRAIN, "--out", str(out), "--log", "tensorboard", "--log", "wandb"]) == 0
    table = pd.read_parquet(out / "metrics.parquet")
    runs = wandb_runs(out)
    assert set(runs) == {"seed=0", "seed=1"}
    for seed, rows in table.groupby("seed"):
        assert_logged(scalars(out / "tensorboard" / f"seed={seed}"), rows)
        columns = hparams_session(out / "tensorboard" / f"seed={seed}")
        assert columns["algo"] == "ppo" and columns["task"] == "toy_reach"
        assert columns["lag_model"] == "fixed" and (columns["lag"], columns["seed"]) == (0, seed)
        assert columns["learning_rate"] == 3e-4  # as given, not float32's 3.0000001e-4

        run = runs[f"seed={seed}"]
        assert_logged(run["history"], rows)
        assert len(run["ids"]) == 1 and run["exit"] == [0]
        assert run["project"] == "vaco_jax_tests" and run["group"] == "toy-ppo"
        assert set(run["tags"]) == {"ppo", "toy_reach", "lag=fixed:0"}
        assert run["config"]["seed"] == seed and run["config"]["config"]["num_envs"] == 8
        assert run["config"]["hparams"]["learning_rate"] == 3e-4
    # Recorded in the run's manifest: an overwrite removes what the trackers wrote.
    assert cli.main([*TRAIN, "--out", str(out), "--overwrite", "--seed-offset", "7"]) == 0
    assert not (out / "tensorboard").exists() and not (out / "wandb").exists()


def test_a_resumed_run_logs_each_update_once(tmp_path, monkeypatch, offline_wandb):
    """Stopped after its first and second chunk: W&B, first asked for on the first resume,
    logs the history so far, then continues its runs; TensorBoard logs each update once, in
    an event file per session."""
    # Every session opens its event files in the same second, as a quick resume does.
    monkeypatch.setattr("tensorboardX.event_file_writer.time",
                        SimpleNamespace(time=lambda: 1_800_000_000.0))
    out = tmp_path / "run"
    train = [*TRAIN, "--total-steps", "1024", "--out", str(out)]  # 8 updates in 4 chunks
    resume = ["train", "--resume", str(out)]
    monkeypatch.setenv(FAULT_ENV, "SIGTERM@chunk:1")
    assert cli.main([*train, "--log", "tensorboard"]) == 143
    monkeypatch.setenv(FAULT_ENV, "SIGTERM@chunk:2")
    assert cli.main([*resume, "--log", "tensorboard", "--log", "wandb"]) == 143
    monkeypatch.delenv(FAULT_ENV)
    assert cli.main([*resume, "--log", "wandb", "--log", "tensorboard"]) == 0
    table = pd.read_parquet(out / "metrics.parquet")
    assert table["update"].max() == 8
    runs = wandb_runs(out)
    for seed, rows in table.groupby("seed"):
        assert_logged(scalars(out / "tensorboard" / f"seed={seed}"), rows)
        run = runs[f"seed={seed}"]
        assert_logged(run["history"], rows)
        assert len(run["ids"]) == 1 and run["exit"] == [1, 0]  # stopped, then finished


def test_a_sweep_logs_each_run_by_its_run_id_once(tmp_path, monkeypatch, offline_wandb):
    """8 runs in batches of 3 (the last padded, its padding not logged), stopped after the
    first chunk of its first and of its second batch, then resumed."""
    experiment = tmp_path / "toy.toml"
    experiment.write_text(TOY_EXPERIMENT)
    out = tmp_path / "sweep"
    logs = ["--log", "tensorboard", "--log", "wandb", "--no-progress"]
    monkeypatch.setenv(FAULT_ENV, "SIGTERM@chunk:1")  # each batch's first chunk
    assert cli.main(["sweep", str(experiment), "--out", str(out), "--max-runs-per-batch", "3",
                     *logs]) == 143
    assert cli.main(["sweep", "--out", str(out), "--resume", *logs]) == 143
    monkeypatch.delenv(FAULT_ENV)
    assert cli.main(["sweep", "--out", str(out), "--resume", *logs]) == 0

    plan = load_sweep(out)
    assert [len(b.runs) for b in plan.batches] == [3, 3, 2] and plan.batches[-1].size == 3
    runs = wandb_runs(out)
    run_ids = set()
    for batch in plan.batches:
        group = plan.experiment.group(batch.group)
        table = pd.read_parquet(out / "runs" / batch.name / "metrics.parquet")
        for row, index in enumerate(batch.runs):
            spec = group.runs[index]
            run_ids.add(spec.run_id)
            rows = table[table["run"] == row]
            assert_logged(scalars(out / "tensorboard" / spec.run_id), rows)
            columns = hparams_session(out / "tensorboard" / spec.run_id)
            assert (columns["run_id"], columns["algo"], columns["seed"]) == (
                spec.run_id, "vaco", spec.seed)
            assert (columns["lag"], columns["tv_delta"]) == pytest.approx(
                (spec.lag, spec.hparams["tv_delta"]))

            run = runs[spec.run_id]
            assert_logged(run["history"], rows)
            assert len(run["ids"]) == 1 and run["exit"][-1] == 0
            assert run["group"] == (f"toy/{group.name}/lag={spec.lag:g}/"
                                    f"tv_delta={spec.hparams['tv_delta']:g}")
            assert set(run["tags"]) == {"vaco", "toy_reach", f"lag=uniform:{spec.lag:g}"}
            assert run["config"]["run_id"] == spec.run_id
    assert {p.name for p in (out / "tensorboard").iterdir() if p.is_dir()} == run_ids
    assert set(runs) == run_ids
    entries = manifest.recorded(out)
    assert entries["tensorboard"] == entries["wandb"] == manifest.TREE


def test_wandb_without_its_package_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    def no_work(*args, **kwargs):
        raise AssertionError("a driver was built")

    monkeypatch.setitem(sys.modules, "wandb", None)  # its import fails
    monkeypatch.setattr("vaco_jax.run.driver.Driver.__init__", no_work)
    experiment = tmp_path / "toy.toml"
    experiment.write_text(TOY_EXPERIMENT)
    for command in ([*TRAIN, "--out", str(tmp_path / "run")],
                    ["sweep", str(experiment), "--out", str(tmp_path / "sweep")]):
        assert cli.main([*command, "--log", "wandb"]) == 2
        assert "pip install 'vaco-jax[wandb]'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
    assert cli.main(["sweep", str(experiment), "--plan", "--log", "tensorboard"]) == 2
    assert "--log applies to a sweep that runs" in capsys.readouterr().err
