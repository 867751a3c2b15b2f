"""Every config field is one flag of its command, generated from the field: a field without a
flag (or a flag of no field) stops the parser from building, and the flags give the config back."""

import argparse
import dataclasses

import pytest

from vaco_jax import cli
from vaco_jax.cli import config_flags
from vaco_jax.cli import tokens as tokens_cli
from vaco_jax.cli import train as train_cli
from vaco_jax.control.config import ControlConfig
from vaco_jax.core.config import Config
from vaco_jax.tokens.config import TokenConfig

COMMANDS = [("train", train_cli, ControlConfig), ("tokens", tokens_cli, TokenConfig)]


def _command_parser(name: str) -> argparse.ArgumentParser:
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


@pytest.mark.parametrize("name, module, config_type", COMMANDS)
def test_every_field_has_one_flag(name, module, config_type):
    dests = {a.dest for a in _command_parser(name)._actions}
    fields = {f.name for f in dataclasses.fields(config_type)}
    assert fields - set(module.COMPOSED) <= dests
    assert set(module.COMPOSED) <= fields


def test_a_field_without_a_flag_is_refused_naming_it():
    @dataclasses.dataclass(frozen=True)
    class Grown(Config):
        width: int = 4
        depth: int = 2

    flags = {"width": config_flags.Flag("width"), "height": config_flags.Flag("height")}
    with pytest.raises(ValueError, match=r"without a flag \['depth'\], without a field "
                                         r"\['height'\]"):
        config_flags.add_config_flags(argparse.ArgumentParser(), Grown, flags, ())


def test_the_default_flags_give_the_default_config():
    parser = cli._parser()
    control, _ = train_cli.build(parser.parse_args(["train", "--env", "toy_reach"]))
    assert control == ControlConfig(env="toy_reach", episode_length=control.episode_length)
    tokens, _ = tokens_cli.build(parser.parse_args(["tokens", "--warm-start-dir", "cache"]))
    assert tokens == TokenConfig(warm_start_dir="cache")


@pytest.mark.parametrize("argv, field, value", [
    (["train", "--actor-hidden", "8,8"], "actor_hidden", (8, 8)),
    (["train", "--no-adaptive-kl"], "adaptive_kl", False),
    (["train", "--episode-length", "50"], "episode_length", 50),
    (["tokens", "--updates", "7"], "num_updates", 7),
    (["tokens", "--bf16-behaviour"], "bf16_behaviour", True),
    (["tokens", "--no-scale-advantages-by-std"], "scale_advantages_by_std", False),
    (["tokens", "--format-penalty", "0.5"], "format_penalty", 0.5),
    (["tokens", "--task", "add_steps", "--reward-on", "result"], "reward_on", "result"),
])
def test_a_flag_reaches_its_field(argv, field, value):
    module = cli.TRAINING_COMMANDS[argv[0]][0]
    config, _ = module.build(cli._parser().parse_args(argv))
    assert getattr(config, field) == value


def test_a_bad_value_is_one_line_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["tokens", "--task-size", "two"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument --task-size: invalid int value: 'two'" in err[0], err
