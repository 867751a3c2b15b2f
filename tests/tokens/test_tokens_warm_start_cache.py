"""Where a warm start is cached (the user's cache folder unless told otherwise) and what it
says: trained and saved there, or loaded from there."""

import logging
import re
from pathlib import Path

import jax
import pytest

from vaco_jax import cli
from vaco_jax.run import driver
from vaco_jax.tokens import tasks, warm_start
from vaco_jax.tokens.model import ModelSpec, TokenPolicy
from vaco_jax.tokens.warm_start import WarmStart

TASK = tasks.make_task("sort", 3)
SPEC = ModelSpec(layers=1, width=32, heads=2, context=12)


def test_a_warm_start_says_where_it_is_saved_and_whence_it_is_loaded(tmp_path, monkeypatch):
    said = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())
    logger = logging.getLogger(warm_start.__name__)
    level = logger.level
    monkeypatch.setattr(warm_start, "supervised_train",  # the saving and loading are tested here
                        lambda task, spec, settings: (TokenPolicy(spec).init(jax.random.PRNGKey(1)),
                                                      None))
    settings = WarmStart(steps=3)
    folder = tmp_path / f"sort-{warm_start.settings_hash(TASK, SPEC, settings)}"
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        warm_start.warm_start(TASK, SPEC, settings, tmp_path)
        warm_start.warm_start(TASK, SPEC, settings, tmp_path)
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
