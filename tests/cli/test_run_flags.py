"""The run flags of `train` and `tokens`: out-of-range values and flags a resume would ignore are
refused in one line before a driver is built or anything is written."""

import argparse

import pytest

import vaco_jax

from engine_configs import TOY_EXPERIMENT
from vaco_jax import cli
from vaco_jax.experiment import spec
from vaco_jax.run import driver

TRAIN = ["train", "--env", "toy_reach", "--no-progress"]


@pytest.fixture
def no_driver(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("built a driver before refusing")
    monkeypatch.setattr(driver, "Driver", refuse)


@pytest.mark.parametrize("command", ["train", "tokens"])
@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0"], "--seeds must be a positive integer, got 0"),
    (["--chunk-periods", "0"], "--chunk-periods must be a positive integer, got 0"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints must be a positive integer, got 0"),
    (["--seed-offset", "-5"], "--seed-offset must lie in 0..4294967294 (seeds are unsigned "
                              "32-bit integers), got -5"),
    (["--seeds", "3", "--seed-offset", "4294967294"], "--seed-offset must lie in 0..4294967293"),
    (["--keep", "notes.txt"], "--keep applies only with --overwrite"),
    (["--overwrite", "--keep", "../x"], "--keep ../x: a kept path is relative to the output "
                                        "folder and lies inside it"),
    (["--overwrite", "--keep", "/notes.txt"], "--keep /notes.txt: a kept path is relative"),
])
def test_out_of_range_run_flags_are_refused_before_anything_is_written(
        tmp_path, capsys, no_driver, command, flags, message):
    out = tmp_path / "run"
    assert cli.main([command, *flags, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("flags, named", [
    (["--total-steps", "4096"], "--total-steps"),
    (["--hparam", "learning_rate=0.1", "--env", "reacher"], "--env, --hparam"),
    (["--seeds", "5", "--out", "elsewhere"], "--seeds, --out"),
    (["--seeds", "2"], "--seeds"),  # the default value, but written out: it would be ignored
    (["--env=toy_reach"], "--env"),
    (["--overwrite"], "--overwrite"),
])
def test_resume_refuses_the_flags_it_would_ignore(tmp_path, capsys, no_driver, flags, named):
    assert cli.main(["train", "--resume", str(tmp_path), "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert f"{named} cannot change them" in err, err
    assert ("only --chunk-periods, --keep-checkpoints, --no-progress, --memory-budget and --log apply"
            in err)


def test_an_unparsable_experiment_names_its_file(tmp_path, capsys):
    path = tmp_path / "broken.toml"
    path.write_text("name = [\n")
    assert cli.main(["sweep", str(path), "--plan"]) == 2
    err = capsys.readouterr().err
    assert f"experiment file {str(path)!r}: experiment 'broken': not valid TOML" in err, err
    assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(ValueError, match=str(path)):
        spec.load_experiment(path)


def test_abbreviated_flags_are_not_accepted(capsys):
    """A resume refuses every flag written out, which an abbreviation would slip past."""
    with pytest.raises(SystemExit):
        cli.main(["train", "--resume", "runs/x", "--total", "100"])
    assert "unrecognized arguments: --total" in capsys.readouterr().err


def test_an_experiments_seeds_are_range_checked_when_parsed():
    text = TOY_EXPERIMENT.replace("seeds = 2", "seeds = [-1, 0]")
    with pytest.raises(ValueError, match="seeds must lie in 0..4294967295 .*got -1"):
        spec.parse_experiment(text)


def test_a_replan_refuses_batches_larger_than_fit_here():
    from vaco_jax.experiment.plan import make_plan

    experiment = spec.parse_experiment(TOY_EXPERIMENT)
    group = experiment.groups[0].name
    with pytest.raises(ValueError, match=f"group {group}: its batches of 8 runs were planned on "
                                         f"another machine; here at most 2 fit"):
        make_plan(experiment, max_runs_per_batch=2, batch_sizes={group: 8})


def test_every_flag_has_help_and_a_readable_default():
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        for action in command._actions:
            if action.option_strings:
                assert action.help, f"{name} {action.option_strings[-1]} has no help"
                assert not isinstance(action.default, tuple), (
                    f"{name} {action.option_strings[-1]} shows its default as a tuple")


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"vaco-jax {vaco_jax.__version__} (jax ")


def test_help_states_each_default_once(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: the task's own, as `vaco-jax envs` lists it)" in text
    assert "(default: None)" not in text
    assert "(default: ppo)" in text


@pytest.mark.parametrize("setup, message", [
    ("results", "already exists and is not empty"),
    ("foreign", "which vaco_jax did not write"),
])
def test_a_refused_folder_prints_its_line_alone(tmp_path, capsys, setup, message):
    """The run's header comes once the folder is accepted, so a refusal is one line."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    flags = ["--overwrite"] if setup == "foreign" else []
    assert cli.main([*TRAIN, "--out", str(out), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert (out / "notes.txt").read_text() == "mine"
