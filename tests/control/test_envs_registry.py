"""The task registry: registration and its errors, entry points, listings, and the episode
length that `train` and sweeps take from a task."""

import re
import subprocess
import sys

import pytest

from engine_configs import TOY_EXPERIMENT
from fake_plugins import fake_entry_points, uncalled_entry_points
from vaco_jax import cli
from vaco_jax.cli import train as train_cli
from vaco_jax.control import envs
from vaco_jax.control.envs.brax_env import BRAX_UNSUPPORTED, BraxEnvironment
from vaco_jax.control.envs.toy import ToyReach
from vaco_jax.experiment import parse_experiment


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, entry points not yet loaded, restored afterwards."""
    monkeypatch.setattr(envs, "_TASKS", dict(envs._TASKS))
    uncalled_entry_points(monkeypatch)
    return envs


def _toy(backend):
    return ToyReach()


# ---------------------------------------------------------------- registration


def test_register_adds_a_task_that_make_env_builds(registry):
    registry.register("my_reach", _toy, episode_length=60, reference_score=60.0,
                      reference="maximum", discrete=False, action_size=1)
    assert registry.names()[-1] == "my_reach"
    spec = registry.task("my_reach")
    assert (spec.episode_length, spec.backends, spec.reference_score) == (60, ("jax",), 60.0)
    assert isinstance(registry.make_env("my_reach"), ToyReach)


def test_a_duplicate_name_is_refused_unless_replaced(registry):
    with pytest.raises(ValueError, match=r"env='toy_reach' is already registered; pass "
                                         r"replace=True"):
        registry.register("toy_reach", _toy)
    registry.register("toy_reach", _toy, episode_length=7, replace=True)
    assert registry.task("toy_reach").episode_length == 7


@pytest.mark.parametrize("kwargs,message", [
    ({"episode_length": 0}, "episode_length must be a positive integer"),
    ({"episode_length": 10.0}, "episode_length must be a positive integer"),
    ({"backends": ()}, "backends must be a non-empty tuple"),
    ({"action_size": 0}, "action_size must be a positive integer or None"),
])
def test_bad_registrations_name_the_field(registry, kwargs, message):
    with pytest.raises(ValueError, match=message):
        registry.register("bad", _toy, **kwargs)
    assert "bad" not in registry.names()


def test_an_unknown_env_names_the_allowed_values():
    with pytest.raises(ValueError, match="env='nope' is not supported; allowed values: ") as error:
        envs.task("nope")
    for name in ("inverted_double_pendulum", "CartPole-v1", "Breakout-MinAtar",
                 "CartpoleBalance", "toy_reach"):
        assert name in str(error.value)


def test_an_unsupported_backend_names_the_task_s_backends():
    with pytest.raises(ValueError, match="backend='mjx' is not supported for env='CartPole-v1'; "
                                         "allowed values: jax"):
        envs.make_env("CartPole-v1", "mjx")


def test_built_in_registrations():
    assert envs.backends_for("ant")[0] == "mjx"
    assert not set(BRAX_UNSUPPORTED) & set(envs.names())
    with pytest.raises(ValueError, match="env='swimmer' is not supported: Brax runs it on its "
                                         "generalized pipeline only"):
        BraxEnvironment("swimmer", "generalized")
    assert envs.backends_for("CartpoleBalance") == ("mjx",)
    assert envs.backends_for("Breakout-MinAtar") == ("jax",)
    assert envs.task("CartPole-v1").reference_score == 500.0
    assert envs.task("inverted_double_pendulum").reference.startswith("maximum")
    assert envs.task("Freeway-MinAtar").episode_length == 2500
    assert envs.task("ant").reference_score is None


def test_listing_the_registry_imports_neither_gymnax_nor_playground():
    code = ("import sys; from vaco_jax.control import envs; from vaco_jax.cli import envs as c; "
            "c.rows(); print(len(envs.names())); "
            "print([m for m in sys.modules if m.startswith(('gymnax', 'mujoco_playground', "
            "'brax'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert int(out[0]) >= 44 and out[1] == "[]"


@pytest.mark.slow
def test_brax_listings_match_their_adapters():
    for name in ("ant", "humanoid", "inverted_double_pendulum"):
        spec, env = envs.task(name), envs.make_env(name)
        assert (spec.discrete, spec.action_size) == (env.discrete, env.action_size), name


# ---------------------------------------------------------------- entry points


def test_entry_points_register_tasks_once_on_first_use(registry, monkeypatch):
    calls = []

    def register_plugin():
        calls.append(1)
        envs.register("plugin_reach", _toy, episode_length=77)
    asked = fake_entry_points(monkeypatch, "vaco_jax.envs", {"register_plugin": register_plugin})
    assert not calls  # not at registration nor at import: on the registry's first use
    assert registry.task("plugin_reach").episode_length == 77
    assert "plugin_reach" in registry.names()
    registry.backends_for("plugin_reach")
    assert calls == [1] and asked == ["vaco_jax.envs"]


def test_a_failing_entry_point_warns_and_the_others_still_register(registry, monkeypatch):
    def broken():
        raise RuntimeError("no such simulator")

    def duplicate():
        envs.register("toy_reach", _toy)

    def good():
        envs.register("plugin_reach", _toy)
    fake_entry_points(monkeypatch, "vaco_jax.envs",
                      {"broken": broken, "duplicate": duplicate, "good": good})
    with pytest.warns(RuntimeWarning) as warned:
        names = registry.names()
    assert "plugin_reach" in names
    messages = [str(w.message) for w in warned]
    assert any("'broken' (fake_vaco_plugin:broken)" in m and "no such simulator" in m
               for m in messages)
    assert any("'duplicate'" in m and "already registered" in m for m in messages)


# ---------------------------------------------------------------- command line


def test_envs_command_lists_every_task(registry, capsys):
    registry.register("plugin_reach", _toy, backends=("jax", "other"), episode_length=33)
    assert cli.main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["task", "backends"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == list(registry.names())
    assert re.fullmatch(r"CartPole-v1 +jax +discrete 2 +500 +500 maximum.*", rows["CartPole-v1"])
    assert re.fullmatch(r"CartpoleBalance \[playground\] +mjx +continuous 1 +1000 +1000 maximum.*",
                        rows["CartpoleBalance"])
    assert lines[-1] == ("tasks marked [playground] need the playground extra: "
                         "pip install 'vaco-jax[playground]'")
    assert re.fullmatch(r"ant +mjx,generalized,positional,spring +continuous 8 +1000 +-",
                        rows["ant"])
    assert re.fullmatch(r"plugin_reach +jax,other +\? +33 +-", rows["plugin_reach"])


def test_train_help_lists_the_tasks_registered_when_it_is_built(registry, capsys):
    registry.register("plugin_reach", _toy)
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = re.sub(r"\s+", "", capsys.readouterr().out)
    for name in registry.names():
        assert name in text, name


@pytest.mark.parametrize("flags,expected", [(["--env", "Pendulum-v1"], 200),
                                            (["--env", "Freeway-MinAtar"], 2500),
                                            (["--env", "Pendulum-v1", "--episode-length", "40"],
                                             40),
                                            ([], 1000)])
def test_train_takes_the_task_s_episode_length_unless_given(flags, expected):
    config, _ = train_cli.build(cli._parser().parse_args(["train", *flags]))
    assert config.episode_length == expected


def test_train_refuses_an_unknown_env_naming_the_allowed_values(tmp_path, capsys):
    assert cli.main(["train", "--env", "nope", "--out", str(tmp_path / "run")]) == 2
    assert "env='nope' is not supported; allowed values: " in capsys.readouterr().err


# ---------------------------------------------------------------- sweeps


def _experiment(tasks: list[str], config_line: str = "", overrides: str = "") -> str:
    text = TOY_EXPERIMENT.replace('tasks = ["toy_reach"]', f"tasks = {tasks!r}".replace("'", '"'))
    text = text.replace("episode_length = 40\n", config_line)
    return text + overrides


def _lengths(text: str) -> dict[str, int]:
    return {g.config.env: g.config.episode_length for g in parse_experiment(text).groups}


def test_a_sweep_takes_each_task_s_episode_length_unless_set():
    assert _lengths(_experiment(["Pendulum-v1", "toy_reach"])) == {"Pendulum-v1": 200,
                                                                    "toy_reach": 1000}
    assert _lengths(_experiment(["Pendulum-v1", "toy_reach"], "episode_length = 40\n")) == {
        "Pendulum-v1": 40, "toy_reach": 40}
    override = '\n[overrides."Pendulum-v1".config]\nepisode_length = 60\n'
    assert _lengths(_experiment(["Pendulum-v1", "toy_reach"], overrides=override)) == {
        "Pendulum-v1": 60, "toy_reach": 1000}
