import argparse
import dataclasses

import pytest

from vaco_jax.cli import main
from vaco_jax.cli import tokens as tokens_cli
from vaco_jax.core.lag_models import InFlight
from vaco_jax.tokens.warm_start import LEGACY, WarmStart


def test_bad_token_settings_are_reported_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["tokens", "--group-size", "1", "--out", str(out)]) == 2
    assert "group_size=1" in capsys.readouterr().err
    assert not out.exists()
    assert main(["tokens", "--lag", "fixed:9", "--out", str(out)]) == 2
    assert "lag for lag_model='fixed' must be an integer in [0, 3]" in capsys.readouterr().err
    assert main(["tokens", "--lag", "empirical:0.5,0.6", "--out", str(out)]) == 2
    assert "lag_probabilities must sum to 1" in capsys.readouterr().err
    assert main(["tokens", "--hparam", "learning_rate=inf", "--out", str(out)]) == 2
    assert "hyper-parameter learning_rate must be finite, got [inf" in capsys.readouterr().err
    assert main(["tokens", "--hparam", "temperature=nan", "--out", str(out)]) == 2
    assert "hyper-parameter temperature must be finite, got [nan" in capsys.readouterr().err
    assert not out.exists()


def test_unknown_lag_model_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["tokens", "--lag", "poisson:1"])
    assert "MODEL one of fixed, uniform, geometric, per_actor, bounded, in_flight, empirical" in (
        capsys.readouterr().err)


def test_bad_thresholds_of_the_chosen_algorithm_are_reported_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["tokens", "--algo", "tis", "--is-level", "sequence", "--hparam", "is_cap=0.5",
                 "--out", str(out)]) == 2
    assert "is_cap must lie in [1, inf), got [0.5" in capsys.readouterr().err
    assert main(["tokens", "--algo", "vaco", "--tv-reference", "behaviour", "--hparam",
                 "tv_delta=2.5", "--out", str(out)]) == 2
    assert "tv_delta must lie in [0, 2], got [2.5" in capsys.readouterr().err
    assert not out.exists()


def test_unknown_algorithm_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["tokens", "--algo", "ppo"])
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


def test_the_authors_budgets_go_by_name_on_the_command_line_and_in_experiments():
    from vaco_jax import experiment
    from vaco_jax.cli.common import hparam_type
    from vaco_jax.control.config import ControlHParams
    from vaco_jax.tokens.config import TokenHParams

    assert hparam_type(TokenHParams)("tv_delta=tvpo_lm") == ("tv_delta", 0.015)
    assert hparam_type(ControlHParams)("tv_delta=vaco_mujoco") == ("tv_delta", 0.2)
    with pytest.raises(argparse.ArgumentTypeError,
                       match="tv_delta needs a number or one of vaco_mujoco, tvpo_lm, "
                             "tvpo_lm_tight, got 'paper'"):
        hparam_type(TokenHParams)("tv_delta=paper")
    with pytest.raises(argparse.ArgumentTypeError, match="is_cap needs a number, got 'big'"):
        hparam_type(TokenHParams)("is_cap=big")
    parsed = experiment.parse_experiment(
        'name = "budgets"\ntestbed = "tokens"\ntasks = ["add"]\nalgos = ["vaco"]\nseeds = 1\n'
        '[lag]\nmodel = "fixed"\nlevels = [0]\n'
        '[hparams]\ntv_delta = ["tvpo_lm_tight", "tvpo_lm", 0.1]\n')
    group = parsed.groups[0]
    assert sorted({r.hparams["tv_delta"] for r in group.runs}) == [0.01, 0.015, 0.1]


@pytest.mark.parametrize("flags,expected", [
    ([], WarmStart()),
    (["--warm-start", "legacy"], LEGACY),
    (["--warm-start", "legacy", "--warm-start-steps", "175", "--corrupt-fraction", "0.2"],
     dataclasses.replace(LEGACY, steps=175, corrupt_fraction=0.2)),
    (["--corrupted-share", "0.3", "--wrong-probability", "0.9"],
     WarmStart(corrupted_share=0.3, wrong_probability=0.9)),
])
def test_the_warm_start_flags_choose_a_preset_and_override_its_values(flags, expected):
    parser = argparse.ArgumentParser()
    tokens_cli.add_arguments(parser)
    config, _ = tokens_cli.build(parser.parse_args(flags))
    assert config.warm_start == expected


@pytest.mark.parametrize("flags, message", [
    (["--corrupt-fraction", "0.2"],
     "--corrupt-fraction does not apply to --warm-start calibrated; its own: "
     "--corrupted-share, --wrong-probability"),
    (["--warm-start", "legacy", "--wrong-probability", "0.9"],
     "--wrong-probability does not apply to --warm-start legacy; its own: --corrupt-fraction"),
])
def test_a_flag_of_the_other_warm_start_is_refused_before_any_work(flags, message, tmp_path,
                                                                   capsys):
    out = tmp_path / "run"
    assert main(["tokens", *flags, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_bad_warm_start_is_reported_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["tokens", "--corrupted-share", "0.25", "--out", str(out)]) == 2
    assert "corrupted_share=0.25 must be a multiple of 0.1" in capsys.readouterr().err
    assert not out.exists()


def test_the_in_flight_cache_is_chosen_on_the_command_line(capsys):
    parser = argparse.ArgumentParser()
    tokens_cli.add_arguments(parser)
    assert tokens_cli.build(parser.parse_args([]))[0].in_flight_cache == "shared"
    config, _ = tokens_cli.build(parser.parse_args(["--lag", "in_flight:2",
                                                    "--in-flight-cache", "per_snapshot"]))
    assert (config.lag_model, config.in_flight_cache) == (InFlight(), "per_snapshot")
    with pytest.raises(SystemExit):
        main(["tokens", "--in-flight-cache", "engine"])
    err = capsys.readouterr().err
    assert "--in-flight-cache: invalid choice: 'engine'" in err
    assert "per_snapshot" in err and "shared" in err


@pytest.mark.parametrize("flags, expected", [
    (["--algo", "vcpo"], ("adamw", 16, 4)),  # the authors' optimiser and group, 64 samples kept
    (["--algo", "vcpo", "--group-size", "8"], ("adamw", 8, 8)),  # a flag pins its field
    (["--algo", "vcpo", "--optimizer", "adam", "--prompts", "16"], ("adam", 16, 16)),
    (["--algo", "vcpo_grpo_setting"], ("adam", 8, 8)),  # the form before 2026-12-07
    (["--algo", "grpo"], ("adam", 8, 8)),
])
def test_vcpo_runs_at_its_authors_optimiser_and_group_size_unless_a_flag_says_otherwise(
        flags, expected):
    parser = argparse.ArgumentParser()
    tokens_cli.add_arguments(parser)
    config, hparams = tokens_cli.build(parser.parse_args(flags))
    assert (config.optimizer, config.group_size, config.prompts) == expected
