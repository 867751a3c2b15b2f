"""A run's warm start resolved before it starts: trained and saved in its cache folder (the
user's unless told otherwise), or loaded from there, what it says, and the trainer given it."""

import dataclasses
import logging
import re
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from vaco_jax import cli
from vaco_jax.control.train import ControlTrainer
from vaco_jax.run import driver, warm_start
from vaco_jax.tokens import evaluation, tasks
from vaco_jax.tokens import warm_start as supervised
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.model import ModelSpec, TokenPolicy
from vaco_jax.tokens.train import TokenTrainer
from vaco_jax.tokens.warm_start import SupervisedStart, WarmStart
from engine_configs import TOY

TASK = tasks.make_task("sort", 3)
SPEC = ModelSpec(layers=1, width=32, heads=2, context=12)


def _start(settings: WarmStart, cache_dir) -> SupervisedStart:
    return SupervisedStart(TASK, SPEC, settings, cache_dir)


def test_warm_start_learns_is_saved_and_reused(tmp_path, monkeypatch):
    settings = WarmStart(steps=120, batch=32, learning_rate=1e-2)
    params = warm_start.resolve(_start(settings, tmp_path))
    policy = TokenPolicy(SPEC)
    prompts, answers = evaluation.held_out_set(TASK, 128)
    untrained = evaluation.greedy_accuracy(policy, policy.init(jax.random.PRNGKey(0)), prompts,
                                           answers, TASK.answer_length)
    trained = evaluation.greedy_accuracy(policy, params, prompts, answers, TASK.answer_length)
    assert trained > untrained + 0.1

    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # beside its lock
    assert folder.name == f"sort-{supervised.settings_hash(TASK, SPEC, settings)}"

    def no_training(*_):
        raise AssertionError("a cached warm start was trained again")
    monkeypatch.setattr(supervised, "supervised_train", no_training)
    restored = warm_start.resolve(_start(settings, tmp_path))
    jax.tree.map(np.testing.assert_array_equal, restored, params)
    with pytest.raises(AssertionError, match="trained again"):
        warm_start.resolve(_start(WarmStart(steps=121, batch=32), tmp_path))


def test_every_warm_start_setting_names_its_own_cache_folder():
    changed = {"corruption": "random_digit", "steps": 3, "batch": 3, "learning_rate": 0.1,
               "schedule": "constant", "corrupted_share": 0.2, "wrong_probability": 0.9,
               "corrupt_fraction": 0.1, "seed": 7}
    assert set(changed) == {f.name for f in dataclasses.fields(WarmStart)}
    base = supervised.settings_hash(TASK, SPEC, WarmStart())
    hashes = {supervised.settings_hash(TASK, SPEC, WarmStart(**{name: value}))
              for name, value in changed.items()}
    assert len(hashes) == len(changed) and base not in hashes


def test_cache_folders_written_before_the_task_classes_are_still_found():
    """The hashes of warm starts cached before each task became a class of its own (commit
    3325163), so that those caches stay valid; a new task has folders of its own."""
    before = {("add", "calibrated"): "3e7fb5a1946ffef2", ("add", "legacy"): "8bc03c5773422549",
              ("sort", "calibrated"): "e9385a817a2eb2f2", ("sort", "legacy"): "e6ccbbfad5797da6",
              ("chain", "calibrated"): "1b0033adee8186ae", ("chain", "legacy"): "58b71ec3b8cbdf7d"}
    for (name, preset), recorded in before.items():
        assert supervised.settings_hash(tasks.make_task(name, 3), ModelSpec(),
                                        supervised.PRESETS[preset]) == recorded
    new = {supervised.settings_hash(tasks.make_task("add_steps", 3), ModelSpec(), settings)
           for settings in supervised.PRESETS.values()}
    assert len(new) == 2 and not new & set(before.values())


def test_runs_needing_one_warm_start_at_once_train_it_once(tmp_path, monkeypatch):
    """A sweep's foreground program and the one it prepares in the background (threads of one
    process), or two sweeps: the first trains the warm start, the other waits and loads it."""
    trained = []

    def slow_training(task, spec, settings):
        trained.append(threading.current_thread().name)
        time.sleep(1.0)  # long enough for the other to arrive while it trains
        return TokenPolicy(spec).init(jax.random.PRNGKey(1)), None
    monkeypatch.setattr(supervised, "supervised_train", slow_training)
    start = _start(WarmStart(steps=3), tmp_path)
    results = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, warm_start.resolve(
        start)), name=f"run{n}") for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(trained) == 1 and sorted(results) == [0, 1]
    jax.tree.map(np.testing.assert_array_equal, results[0], results[1])


def test_a_warm_start_says_where_it_is_saved_and_whence_it_is_loaded(tmp_path, monkeypatch):
    said = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())
    logger = logging.getLogger(warm_start.__name__)
    level = logger.level
    monkeypatch.setattr(supervised, "supervised_train",  # the saving and loading are tested here
                        lambda task, spec, settings: (TokenPolicy(spec).init(jax.random.PRNGKey(1)),
                                                      None))
    settings = WarmStart(steps=3)
    folder = tmp_path / f"sort-{supervised.settings_hash(TASK, SPEC, settings)}"
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        warm_start.resolve(_start(settings, tmp_path))
        warm_start.resolve(_start(settings, tmp_path))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert said[0] == "warm start: training 3 supervised steps on sort ..."
    assert re.fullmatch(rf"warm start: 3 steps in \d+\.\d s -> {re.escape(str(folder))}", said[1])
    assert said[2:] == [f"warm start: loaded from {folder}"]


@pytest.mark.parametrize("xdg,expected", [("/somewhere/cache", "/somewhere/cache"),
                                          ("relative/cache", None), ("", None)])
def test_the_default_cache_is_the_users(monkeypatch, tmp_path, xdg, expected):
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    root = tmp_path / ".cache" if expected is None else expected
    assert warm_start.default_cache_dir() == Path(root) / "vaco_jax" / "warm_start"


class _Recorded(Exception):
    pass


def test_tokens_caches_its_warm_start_in_the_users_cache_not_where_it_stands(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    recorded = {}

    def record(config, hparams, seeds):
        recorded["config"] = config
        raise _Recorded
    monkeypatch.setattr(driver, "Driver", record)
    with pytest.raises(_Recorded):
        cli.main(["tokens", "--no-progress", "--out", str(tmp_path / "run")])
    assert recorded["config"].warm_start_dir == str(tmp_path / "cache" / "vaco_jax" / "warm_start")


def test_a_trainer_is_given_its_warm_start_resolved_and_a_control_trainer_is_kept(tmp_path,
                                                                                 monkeypatch):
    control = ControlTrainer(TOY)
    assert warm_start.starting_trainer(control) is control
    trained = TokenPolicy(SPEC).init(jax.random.PRNGKey(1))
    monkeypatch.setattr(supervised, "supervised_train", lambda task, spec, settings: (trained,
                                                                                      None))
    config = TokenConfig(task="sort", task_size=3, layers=1, width=32, heads=2, context=12,
                         prompts=2, group_size=2, eval_prompts=4,
                         warm_start=WarmStart(steps=3), warm_start_dir=str(tmp_path))
    trainer = TokenTrainer(config)
    assert trainer.pending_warm_start == SupervisedStart(config.task_spec, config.model_spec,
                                                         config.warm_start, str(tmp_path))
    started = warm_start.starting_trainer(trainer)
    assert started.pending_warm_start is None and started.config == config
    jax.tree.map(np.testing.assert_array_equal, started.initial_params, trained)
    assert warm_start.starting_trainer(started) is started
    state = started.init(jax.random.PRNGKey(0), TokenHParams.create())
    jax.tree.map(np.testing.assert_array_equal, state.params, trained)
    name = "sort-" + supervised.settings_hash(config.task_spec, config.model_spec,
                                              config.warm_start)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{name}.lock", name]
