"""The chunked driver and `vaco-jax train`: outputs, resume exactness, refusals, bad input."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from engine_configs import TOY
from processes import ROOT, with_devices
import vaco_jax
from vaco_jax import cli
from vaco_jax.control.config import ControlHParams, ControlConfig
from vaco_jax.control.train import make_train
from vaco_jax.core.lag_models import Geometric
from vaco_jax.run import program
from vaco_jax.run.background import BACKGROUND_THREAD, background_work, in_background
from vaco_jax.run.driver import Driver

CONFIG = TOY.replace(total_steps=TOY.steps_per_update * TOY.eval_every * 2)  # two periods
HPARAMS = ControlHParams.create(lag=1.0, learning_rate=1e-3)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    return out, Driver(CONFIG, HPARAMS, [0, 1]).run(out, chunk_periods=1, progress=False)


def test_outputs_and_files(straight):
    out, result = straight
    assert result.complete and result.updates_done == CONFIG.num_updates
    for name in ("metrics.csv", "metrics.parquet", "config.json", "status.json"):
        assert (out / name).is_file(), name
    assert (out / "checkpoint").is_dir()
    table = pd.read_csv(out / "metrics.csv")
    assert len(table) == 2 * (CONFIG.num_updates + 1)
    initial = table[table["update"] == 0]
    assert (initial.env_steps == 0).all() and initial.eval_return.notna().all()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "metrics.parquet"), result.table(),
                                  check_dtype=False)
    saved = json.loads((out / "config.json").read_text())
    assert ControlConfig.from_dict(saved["config"]) == CONFIG
    assert saved["seeds"] == [0, 1]
    provenance = saved["provenance"]
    assert provenance["packages"]["vaco-jax"] == vaco_jax.__version__
    assert provenance["devices"]["count"] == len(jax.devices())
    assert provenance["code"] is None or len(provenance["code"]["commit"]) == 40
    status = json.loads((out / "status.json").read_text())
    assert status["complete"] and not any(run["diverged"] for run in status["runs"])


def test_resume_continues_exactly(straight, tmp_path):
    _, uninterrupted = straight
    out = tmp_path / "run"
    first = Driver(CONFIG, HPARAMS, [0, 1]).run(out, chunk_periods=1, max_chunks=1, progress=False)
    assert not first.complete and first.updates_done == CONFIG.updates_per_period
    resumed = Driver.from_run_dir(out).run(out, chunk_periods=1, resume=True, progress=False)
    assert resumed.complete
    for name, values in uninterrupted.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    jax.tree.map(np.testing.assert_array_equal, resumed.state, uninterrupted.state)


def test_scores_are_the_whole_run_program_s(straight):
    """The driver scores each period after its chunk, with the program that scores the initial
    state; the scores are, to the bit, those the whole-run program computes inside itself."""
    _, result = straight
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(s), 0))(jnp.arange(2))
    _, metrics = jax.jit(jax.vmap(make_train(CONFIG), in_axes=(0, None)))(keys, HPARAMS)
    scores = result.metrics["eval_return"][:, 1:]
    assert np.isfinite(scores).sum() == 2 * CONFIG.num_periods
    np.testing.assert_array_equal(scores, metrics["eval_return"])


def _wait_for_background_work() -> None:
    while background_work():
        time.sleep(0.01)


def _compilations(run) -> list[tuple[str, str]]:
    """`(program, thread)` of every compilation during `run()` (JAX's compilation events, which
    every thread reports)."""
    compiled = []

    def listen(event, duration, **info):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append((info.get("fun_name"), threading.current_thread().name))
    _wait_for_background_work()  # another test's sweep may have left a group compiling
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        run()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return compiled


def _chunk_compiles(run) -> list[str]:
    """The threads that compiled a chunk program (`jit(run)`) during `run()`, each time one
    did."""
    return [thread for program, thread in _compilations(run) if program == "jit(run)"]


def test_the_evaluation_is_traced_and_compiled_once_outside_the_chunk_program(tmp_path):
    run = Driver(CONFIG, HPARAMS, [0, 1])
    traced = []
    evaluate = run.program.trainer.evaluate
    run.program.trainer.evaluate = lambda policy, key: traced.append(1) or evaluate(policy, key)
    programs = [program for program, _ in _compilations(
        lambda: run.run(tmp_path / "run", chunk_periods=1, progress=False))]  # two chunks
    assert len(traced) == 1
    assert programs.count("jit(evaluation_score)") == 1 and programs.count("jit(run)") == 1


def test_a_fresh_run_compiles_its_chunk_program_once_beside_its_first_state(monkeypatch,
                                                                             tmp_path):
    """A fresh run's chunk program compiles in a thread of its own while the main thread
    compiles and runs the initial state and evaluation, and the chunks then run it without
    compiling again. A resumed run, a run while another compilation runs in the background and
    a run across processes (where every process compiles in the same order) compile it in the
    main thread. Each `Driver` has programs of its own, compiled anew."""
    out = tmp_path / "run"
    assert _chunk_compiles(lambda: Driver(CONFIG, HPARAMS, [0, 1]).run(
        out, chunk_periods=1, max_chunks=1, progress=False)) == [BACKGROUND_THREAD]
    assert _chunk_compiles(lambda: Driver.from_run_dir(out).run(
        out, chunk_periods=1, resume=True, progress=False)) == [threading.main_thread().name]
    release = threading.Event()
    in_background(release.wait)  # a sweep's next group compiling
    try:
        assert Driver(CONFIG, HPARAMS, [0, 1]).program.start_chunk_compile(None, HPARAMS, 1) is None
    finally:
        release.set()
    _wait_for_background_work()
    monkeypatch.setattr(program, "several", lambda: True)
    assert Driver(CONFIG, HPARAMS, [0, 1]).program.start_chunk_compile(None, HPARAMS, 1) is None


def test_drivers_made_by_with_runs_share_their_programs_and_nothing_else():
    """A driver of other runs shares the program, which alone holds what was compiled; its
    record is its own and immutable, and running either driver changes neither."""
    first = Driver(CONFIG, HPARAMS, [0, 1])
    second = first.with_runs(HPARAMS, [2, 3])
    assert vars(first).keys() == vars(second).keys() == {"program", "record"}
    assert second.program is first.program
    assert second.record is not first.record and second.seeds is not first.seeds
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.record.seeds = [2, 3]
    held = {name: id(value) for name, value in vars(first).items()}
    second.run(chunk_periods=1, max_chunks=1, progress=False)
    assert {name: id(value) for name, value in vars(first).items()} == held
    assert (first.seeds, second.seeds) == ([0, 1], [2, 3]) and first.program.compiled


@pytest.mark.slow
def test_runs_sharded_over_two_devices_compile_their_chunk_program_once_beside():
    """The initial state's abstract shapes carry its sharding over the devices, so the program
    compiled beside is the one the sharded chunks run."""
    script = textwrap.dedent("""
        import sys, threading
        sys.path.insert(0, "tests")
        sys.path.insert(0, "tests/run")
        import jax
        from test_driver import CONFIG, HPARAMS, _chunk_compiles
        from vaco_jax.run.driver import Driver
        assert len(jax.devices()) == 2, jax.devices()
        print(_chunk_compiles(lambda: Driver(CONFIG, HPARAMS, [0, 1]).run(
            chunk_periods=1, progress=False)))
    """)
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=ROOT, env=with_devices(dict(os.environ), 2), timeout=300)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip().splitlines()[-1] == repr([BACKGROUND_THREAD])


def test_a_folder_saved_before_a_config_field_existed_resumes(straight, tmp_path):
    """A run folder whose config.json lacks a field added since (read as its default) resumes
    with its recorded identity, to the same result as the run never interrupted."""
    _, uninterrupted = straight
    out = tmp_path / "run"
    Driver(CONFIG, HPARAMS, [0, 1]).run(out, chunk_periods=1, max_chunks=1, progress=False)
    saved = json.loads((out / "config.json").read_text())
    del saved["config"]["learning_rate_schedule"]  # as a folder of before that field
    old_identity = "0123456789abcdef"
    saved["run_identity"] = old_identity
    (out / "config.json").write_text(json.dumps(saved))
    for identity_file in (out / "checkpoint").glob("*/identity.json"):
        record = json.loads(identity_file.read_text())
        identity_file.write_text(json.dumps({**record, "run_identity": old_identity}))
    resumed = Driver.from_run_dir(out).run(out, chunk_periods=1, resume=True, progress=False)
    assert resumed.complete
    for name, values in uninterrupted.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)
    assert json.loads((out / "status.json").read_text())["run_identity"] == old_identity


def test_a_folder_saved_before_redraw_was_the_default_resumes_as_clip(tmp_path):
    """A folder whose config.json has no `lag_warmup` ran under `clip`, the default then: it
    resumes as `clip` (at lag 3 on a buffer of 4, `redraw` would draw other behaviour versions
    in its first updates) to the same result as the `clip` run never interrupted."""
    config, hparams = CONFIG.replace(lag_warmup="clip"), HPARAMS.replace(lag=jnp.float32(3.0))
    uninterrupted = Driver(config, hparams, [0]).run(tmp_path / "straight", chunk_periods=1,
                                                      progress=False)
    out = tmp_path / "run"
    Driver(config, hparams, [0]).run(out, chunk_periods=1, max_chunks=1, progress=False)
    saved = json.loads((out / "config.json").read_text())
    del saved["config"]["lag_warmup"]
    (out / "config.json").write_text(json.dumps(saved))
    resumed_driver = Driver.from_run_dir(out)
    assert resumed_driver.config.lag_warmup == "clip"
    resumed = resumed_driver.run(out, chunk_periods=1, resume=True, progress=False)
    for name, values in uninterrupted.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)


def test_refuses_to_overwrite_unless_asked(straight):
    out, _ = straight
    with pytest.raises(FileExistsError, match="already exists"):
        Driver(CONFIG, HPARAMS, [0, 1]).run(out, progress=False)


def test_resume_refuses_a_different_run(straight):
    out, _ = straight
    with pytest.raises(ValueError, match="different run"):
        Driver(CONFIG, ControlHParams.create(lag=0.0), [0, 1]).run(out, resume=True, progress=False)


def test_divergence_is_reported_and_other_runs_kept(tmp_path):
    hparams = ControlHParams.stack([ControlHParams.create(learning_rate=1e-3), ControlHParams.create(learning_rate=1e30)])
    result = Driver(CONFIG, hparams, [0, 0]).run(tmp_path / "run", progress=False)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert [run["diverged"] for run in status["runs"]] == [False, True]
    assert status["runs"][1]["diverged_at"] == int(result.diverged_at[1]) >= 0
    assert np.isfinite(status["runs"][0]["final_eval_return"])


@pytest.mark.parametrize("changes, hparams, message", [
    (dict(env="cartpole"), {}, "env='cartpole' is not supported; allowed values: ant"),
    (dict(algo="trpo"), {}, "algo='trpo' is not supported; allowed values:"),
    (dict(backend="brax"), {}, "backend='brax' is not supported"),
    (dict(lag_model="poisson"), {}, "lag_model='poisson' is not supported; allowed values: fixed"),
    (dict(minibatches=3), {}, "must be divisible by minibatches=3"),
    (dict(algo="impala_multistep", minibatches=3), {}, "num_envs=8 must be divisible by minibatches=3"),
    (dict(num_envs=0), {}, "num_envs must be a positive integer"),
    (dict(actor_hidden=()), {}, "actor_hidden must be a non-empty tuple"),
    ({}, dict(lag=4.0), r"lag for lag_model='uniform' must be an integer in \[0, 3\]"),
    (dict(lag_model=Geometric()), dict(lag=0.0), r"must lie in \(0, 1\]"),
    ({}, dict(learning_rate=0.0), r"learning_rate must lie in \(0, inf\)"),
    ({}, dict(gamma=1.5), r"gamma must lie in \[0, 1\]"),
])
def test_bad_configurations_fail_before_compilation(monkeypatch, changes, hparams, message):
    def no_compilation(*args, **kwargs):
        raise AssertionError("compiled before validating")
    monkeypatch.setattr(jax, "jit", no_compilation)
    with pytest.raises(ValueError, match=message):
        Driver(CONFIG.replace(**changes), ControlHParams.create(**hparams), [0])


def test_unknown_hparam_is_named():
    with pytest.raises(ValueError, match=r"unknown hyper-parameter\(s\) \['learning_rat'\]"):
        ControlHParams.create(learning_rat=1e-3)


@pytest.mark.slow
def test_cli_train_resume_and_refusal(tmp_path, capsys):
    out = str(tmp_path / "cli")
    args = ["train", "--env", "toy_reach", "--algo", "vaco", "--lag", "uniform:2", "--seeds", "2",
            "--total-steps", str(CONFIG.total_steps), "--num-envs", "8", "--rollout-length", "16",
            "--epochs", "2", "--minibatches", "2", "--buffer-capacity", "4",
            "--episode-length", "40", "--eval-every", str(CONFIG.eval_every),
            "--num-eval-envs", "4", "--actor-hidden", "16", "--critic-hidden", "16",
            "--hparam", "tv_delta=0.1", "--out", out, "--no-progress"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "seed 0: return" in printed and f"{out}/metrics.csv" in printed
    saved = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert saved["config"]["algo"] == "vaco" and saved["hparams"]["tv_delta"] == [
        pytest.approx(0.1)] * 2
    assert cli.main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["train", "--resume", out, "--no-progress"]) == 0  # already complete: no-op


def test_cli_rejects_a_malformed_lag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--lag", "sometimes:3"])
    assert "argument --lag: must be MODEL:PARAM with MODEL one of fixed, uniform" in (
        capsys.readouterr().err)


def test_checkpoints_round_trip_trees_with_zero_size_arrays(tmp_path):
    from vaco_jax.run.checkpoint import Checkpoints

    tree = {"state": {"qpos": np.arange(3.0), "contacts": np.zeros((0, 4), np.float32)},
            "step": np.int32(7)}
    checkpoints = Checkpoints(tmp_path / "ckpt", identity="run")
    checkpoints.save(1, tree)
    like = jax.tree.map(np.zeros_like, tree)
    step, restored = checkpoints.restore_latest(like, warn=print)
    checkpoints.close()
    assert step == 1
    jax.tree.map(np.testing.assert_array_equal, restored, tree)
    assert restored["state"]["contacts"].shape == (0, 4)


def test_a_checkpoint_of_another_state_layout_is_refused_and_kept(tmp_path):
    """A checkpoint that another version of the package wrote, with other state leaves, is not
    damaged: resuming from it is refused with what differs, and nothing is deleted (skipping it
    as damaged would start the run again and let its checkpoints be replaced)."""
    from vaco_jax.run.checkpoint import Checkpoints

    @flax.struct.dataclass
    class Physics:
        qpos: np.ndarray
        xpos: np.ndarray

    saved = {"state": {"physics": Physics(qpos=np.arange(3.0), xpos=np.ones((2, 3)))},
             "step": np.int32(7)}
    checkpoints = Checkpoints(tmp_path / "ckpt", identity="run")
    checkpoints.save(1, saved)
    step, restored = checkpoints.restore_latest(jax.tree.map(np.zeros_like, saved), warn=print)
    assert step == 1 and isinstance(restored["state"]["physics"], Physics)
    like = {"state": {"physics": (np.zeros(3),)}, "step": np.int32(0)}
    warnings = []
    with pytest.raises(ValueError, match=r"laid out otherwise .* \(1 leaves missing, e\.g\. "
                       r"state\.physics\.0; 2 leaves not expected, e\.g\. state\.physics\.qpos\)"):
        checkpoints.restore_latest(like, warn=warnings.append)
    checkpoints.close()
    assert warnings == [] and checkpoints.steps() == [1]
