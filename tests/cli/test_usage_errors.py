"""What a new user meets first: a bad flag or value is refused in one line that names it (exit
status 2), a task without its optional extra says how to install it, `--help` lists the
algorithms, and a warm start's messages show under `--no-progress`."""

import logging
import re
import sys

import pytest

from vaco_jax import cli
from vaco_jax.cli import common
from vaco_jax.cli import envs as envs_cli
from vaco_jax.control.envs import playground_env
from vaco_jax.run import driver


def _refused(argv: list[str], capsys) -> str:
    """The one line of stderr with which `vaco-jax ARGV` exits with status 2 (the flag parser
    exits with it, a command returns it)."""
    try:
        code = cli.main(argv)
    except SystemExit as done:
        code = done.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("argv, line", [
    (["train", "--lag", "nonsense"],
     "vaco-jax train: error: argument --lag: must be MODEL:PARAM with MODEL one of fixed, "
     "uniform, geometric, per_actor, bounded, in_flight, empirical (e.g. fixed:0, uniform:3, "
     "geometric:0.5, bounded:4, empirical:0.5,0.3,0.2), or PRESET[:LEVEL] with PRESET one of "
     "areal, prime_rl, open_instruct, pipelinerl, got 'nonsense' (see: vaco-jax train --help)"),
    (["tokens", "--lag", "pipelinerl"],
     "vaco-jax tokens: error: argument --lag: lag preset 'pipelinerl' has no default level "
     "(PipelineRL's max_lag sets no bound by default); give one: pipelinerl:LEVEL, or levels "
     "beside preset in an experiment (see: vaco-jax tokens --help)"),
    (["train", "--lag", "uniform:x"],
     "vaco-jax train: error: argument --lag: PARAM must be a number (a comma-separated list of "
     "probabilities for empirical), got 'x' (see: vaco-jax train --help)"),
    (["tokens", "--hparam", "lag=1"],
     "vaco-jax tokens: error: argument --hparam: cannot set lag: set it with --lag MODEL:PARAM "
     "(e.g. --lag uniform:3) (see: vaco-jax tokens --help)"),
    (["train", "--algo", "nosuch"], "vaco-jax train: error: argument --algo: invalid choice: "
                                    "'nosuch' (choose from 'ppo', 'ppo_recompute', "),
    (["nosuch"], "vaco-jax: error: argument command: invalid choice: 'nosuch'"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_flag(capsys, argv, line):
    assert _refused(argv, capsys).startswith(line)


def test_an_unknown_hyper_parameter_is_refused_naming_the_known_ones(capsys):
    line = _refused(["train", "--hparam", "nosuch=1"], capsys)
    assert line.startswith("vaco-jax train: error: argument --hparam: must be NAME=VALUE with "
                           "NAME one of ")
    assert "tv_delta" in line and line.endswith("got 'nosuch=1' (see: vaco-jax train --help)")


@pytest.mark.parametrize("command, given", [("train", []), ("tokens", []),
                                            ("sweep", ["quick.toml"]), ("report", ["runs/x"]),
                                            ("envs", []), ("algorithms", [])])
def test_an_unknown_flag_is_reported_against_its_command(capsys, command, given):
    assert _refused([command, *given, "--nosuch"], capsys) == (
        f"vaco-jax {command}: error: unrecognized arguments: --nosuch "
        f"(see: vaco-jax {command} --help)")


def test_a_playground_task_without_the_extra_says_how_to_install_it(monkeypatch, tmp_path,
                                                                     capsys):
    monkeypatch.setitem(sys.modules, "mujoco_playground", None)  # as if not installed
    playground_env._suite.cache_clear()  # a failed import is not cached: nothing to restore
    out = tmp_path / "run"
    assert cli.main(["train", "--env", "CartpoleBalance", "--no-progress",
                     "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("vaco-jax train: error: env='CartpoleBalance': MuJoCo Playground "
                            "tasks need the optional extra: pip install "
                            "'vaco-jax[playground]'\n")
    assert captured.out == "" and not out.exists()


def test_train_help_lists_every_algorithm(capsys):
    from vaco_jax.control.algorithms import ALGORITHMS

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "--algo {" + ",".join(ALGORITHMS) + "}" in capsys.readouterr().out


class _Stop(Exception):
    pass


def test_a_warm_starts_messages_show_under_no_progress(monkeypatch, tmp_path, capsys):
    """A cold warm start trains for minutes before the first chunk; its messages say so."""
    def warm_start(*args, **kwargs):
        logging.getLogger("vaco_jax.run.warm_start").info(
            "warm start: training 2000 supervised steps on add ...")
        raise _Stop

    monkeypatch.setattr(driver, "Driver", warm_start)
    with pytest.raises(_Stop):
        cli.main(["tokens", "--no-progress", "--out", str(tmp_path / "run")])
    assert capsys.readouterr().err == "warm start: training 2000 supervised steps on add ...\n"


@pytest.fixture
def no_run(monkeypatch, tmp_path):
    """A command that gets past its flags fails the test instead of training, from an empty
    current folder (where an empty folder name would write)."""
    monkeypatch.setattr(common, "run_driver", lambda *args: pytest.fail("the command ran"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", ["train", "tokens"])
def test_a_hyper_parameter_given_twice_is_refused_naming_it(capsys, no_run, command):
    assert _refused([command, "--hparam", "learning_rate=1e-3", "--hparam", "tv_delta=0.2",
                     "--hparam", "learning_rate=3e-4"], capsys) == (
        f"vaco-jax {command}: error: argument --hparam: learning_rate is given twice; give "
        f"each hyper-parameter once (see: vaco-jax {command} --help)")


@pytest.mark.parametrize("argv, flag", [
    (["train", "--out", ""], "--out"), (["tokens", "--out", ""], "--out"),
    (["train", "--resume", ""], "--resume"), (["sweep", "quick.toml", "--out", ""], "--out"),
    (["leaderboard", "--out", ""], "--out"), (["report", ""], "DIR"),
    (["report", "merged", "--parts", "part", ""], "--parts"),
    (["report", "out", "--predictors", ""], "--predictors"),
])
def test_an_empty_folder_is_refused_not_taken_for_the_current_one(capsys, no_run, argv, flag):
    assert _refused(argv, capsys).startswith(
        f"vaco-jax {argv[0]}: error: argument {flag}: must name a folder, got '' (write . for "
        f"the current folder)")
    assert list(no_run.iterdir()) == []


@pytest.mark.parametrize("argv", [["train", "--out"], ["tokens", "--resume"],
                                  ["sweep", "quick.toml", "--out"], ["leaderboard", "--out"],
                                  ["report"], ["report", "merged", "--parts"]])
def test_a_folder_name_too_long_for_file_systems_is_refused_naming_the_flag(capsys, no_run,
                                                                             argv):
    line = _refused([*argv, str(no_run / "runs" / ("a" * 5000))], capsys)
    assert re.fullmatch(r"vaco-jax \w+: error: argument (--\w+|DIR): the name 'a{40}\.\.\. "
                        r"\(5,000 characters\)' in it is longer than the 255 bytes file systems "
                        r"allow \(see: vaco-jax \w+ --help\)", line), line
    assert list(no_run.iterdir()) == []


def test_a_file_name_too_long_is_refused_in_one_short_line(capsys, no_run):
    """A path no flag checks (an experiment file's) fails in the file system: refused input."""
    line = _refused(["sweep", "a" * 5000 + ".toml", "--plan"], capsys)
    assert line.startswith("vaco-jax sweep: error: File name too long: 'aaa") and \
        line.endswith("... (5,005 characters)'; choose a path whose names are shorter")


def test_a_refusal_quoting_a_strangers_text_is_one_line_of_plain_characters(monkeypatch,
                                                                            capsys):
    def refuse(args):
        raise ValueError("study 'x' holds the group red\x1b[31m\nline two" + "!" * 10**6)

    monkeypatch.setattr(envs_cli, "run_envs", refuse)
    line = _refused(["envs"], capsys)
    assert line.isprintable() and len(line) < 2100
    assert line.startswith("vaco-jax envs: error: study 'x' holds the group red\\x1b[31m\\nline "
                           "two!!!") and line.endswith("!... (1,000,043 characters)")
