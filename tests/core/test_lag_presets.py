"""Named lag presets: each resolves to its system's lag model and level, is chosen with `--lag`,
`[lag] preset` or in Python, is recorded by name in a config record, and a bad name or a
missing level is refused in one line that lists the presets."""

import argparse
import types

import pytest

from engine_configs import TOY_EXPERIMENT
from vaco_jax import testbeds
from vaco_jax.cli import console
from vaco_jax.cli import tokens as tokens_cli
from vaco_jax.cli import train as train_cli
from vaco_jax.cli.common import parse_lag
from vaco_jax.control.config import ControlConfig, ControlHParams, validate
from vaco_jax.core.lag_models import LAG_MODELS, Bounded, Fixed, InFlight
from vaco_jax.core.lag_presets import (AREAL, LAG_PRESETS, OPEN_INSTRUCT, PIPELINERL, PRIME_RL,
                                       LagChoice, named)
from vaco_jax.experiment import parse_experiment
from vaco_jax.tokens.config import TokenConfig

# What each system's code sets (the presets' docstrings cite where): its model and level.
SYSTEMS = [(AREAL, Bounded(), 4.0), (PRIME_RL, Fixed(), 2.0), (OPEN_INSTRUCT, Bounded(), 8.0)]
LAG_TABLE = '[lag]\nmodel = "uniform"\nlevels = [0, 2]\n'
PRESET_LIST = "areal, prime_rl, open_instruct, pipelinerl"


def _experiment(lag_tables: str, extra: str = ""):
    assert LAG_TABLE in TOY_EXPERIMENT
    return parse_experiment(TOY_EXPERIMENT.replace(LAG_TABLE, lag_tables)
                            .replace("buffer_capacity = 4", "buffer_capacity = 16") + extra)


def test_the_registry_names_each_preset_once_and_no_preset_is_a_model():
    assert list(LAG_PRESETS) == ["areal", "prime_rl", "open_instruct", "pipelinerl"]
    assert all(LAG_PRESETS[p.name] is p for p in LAG_PRESETS.values())
    assert not set(LAG_PRESETS) & set(LAG_MODELS)


@pytest.mark.parametrize("preset, model, level", SYSTEMS, ids=lambda x: getattr(x, "name", ""))
def test_each_preset_is_its_systems_model_at_its_level_or_another(preset, model, level):
    assert preset.choice() == LagChoice(model, level, preset)
    assert preset.choice(6) == LagChoice(model, 6.0, preset)
    assert parse_lag(preset.name) == preset.choice()
    assert parse_lag(f"{preset.name}:6") == preset.choice(6)
    assert preset.choice().config_fields() == {"lag_model": model, "lag_preset": preset}


def test_pipelinerl_is_in_flight_at_the_level_a_run_gives():
    assert parse_lag("pipelinerl:3") == LagChoice(InFlight(), 3.0, PIPELINERL)
    with pytest.raises(ValueError, match="lag preset 'pipelinerl' has no default level "
                                         r"\(PipelineRL's max_lag sets no bound by default\)"):
        PIPELINERL.choice()


def test_a_model_without_a_preset_is_chosen_as_before():
    assert parse_lag("bounded:4") == LagChoice(Bounded(), 4.0)
    assert parse_lag("fixed:0").config_fields() == {"lag_model": Fixed(), "lag_preset": None}


@pytest.mark.parametrize("text, message", [
    ("areal:x", "LEVEL must be a number, got 'x'"),
    ("pipelinerl", "lag preset 'pipelinerl' has no default level"),
    ("arael", f"or PRESET[:LEVEL] with PRESET one of {PRESET_LIST}, got 'arael'"),
])
def test_a_bad_preset_on_the_command_line_is_one_line(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse_lag(text)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("cli", [train_cli, tokens_cli], ids=["train", "tokens"])
def test_the_commands_build_a_presets_model_level_and_name(cli):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    config, hparams = cli.build(parser.parse_args(["--lag", "prime_rl"]))
    assert (config.lag_model, config.lag_preset, float(hparams.lag)) == (Fixed(), PRIME_RL, 2.0)
    config, hparams = cli.build(parser.parse_args(["--lag", "areal:2"]))
    assert (config.lag_model, config.lag_preset, float(hparams.lag)) == (Bounded(), AREAL, 2.0)
    config, _ = cli.build(parser.parse_args([]))
    assert (config.lag_model, config.lag_preset) == (Fixed(), None)


@pytest.mark.parametrize("config_type", [ControlConfig, TokenConfig])
def test_a_config_records_the_resolved_model_and_the_presets_name(config_type):
    config = config_type(**OPEN_INSTRUCT.choice().config_fields())
    record = config.to_dict()
    assert (record["lag_model"], record["lag_probabilities"], record["lag_preset"]) == (
        "bounded", (), "open_instruct")
    assert config_type.from_dict(record) == config
    assert config_type.from_dict({"lag_model": "bounded"}).lag_preset is None  # older records
    assert config_type().to_dict()["lag_preset"] is None


def test_the_console_header_names_the_preset_and_its_model():
    config = ControlConfig(env="toy_reach", **AREAL.choice().config_fields())
    runs = types.SimpleNamespace(testbed=testbeds.CONTROL, config=config, num_runs=1,
                                 hparams=ControlHParams.create(lag=[4.0]))
    line = console.header(runs, "runs/x", resume=False).splitlines()[1]
    assert line == ("lag: areal (AReaL's rollout.max_head_offpolicyness): bounded 4 (lags "
                    "uniform over 0..15 versions, capped at 4); policy buffer of 16 versions")


@pytest.mark.parametrize("build, message", [
    (lambda: validate(ControlConfig(lag_preset=AREAL)),
     "lag_preset='areal' (AReaL's rollout.max_head_offpolicyness) needs lag_model='bounded', "
     "got lag_model='fixed'"),
    (lambda: validate(ControlConfig(lag_model=Bounded(), lag_preset="areal")),
     "lag_preset='areal' must be a lag preset object: "
     "vaco_jax.core.lag_presets.LAG_PRESETS['areal']"),
    (lambda: validate(ControlConfig(lag_preset="tbd")),
     f"lag_preset='tbd' is not supported; allowed values: {PRESET_LIST}"),
    (lambda: ControlConfig.from_dict({"lag_preset": "slime"}),
     f"lag_preset='slime' is not supported; allowed values: {PRESET_LIST}"),
    (lambda: named(4), f"lag_preset=4 is not supported; allowed values: {PRESET_LIST}"),
])
def test_a_bad_preset_in_a_config_is_one_line_naming_the_field(build, message):
    with pytest.raises(ValueError) as error:
        build()
    assert message in str(error.value) and "\n" not in str(error.value)


# ---------------------------------------------------------------- experiment files

def test_an_experiment_runs_a_preset_at_its_level_or_at_the_levels_it_lists():
    own = _experiment('[lag]\npreset = "areal"\n')
    [group] = own.groups
    assert group.name == "toy_reach-vaco-e2m2"  # one entry: named as a model's would be
    assert (group.config.lag_model, group.config.lag_preset) == (Bounded(), AREAL)
    assert {r.lag for r in group.runs} == {4.0}
    listed = _experiment('[lag]\npreset = "pipelinerl"\nlevels = [0, 3]\n')
    assert (listed.groups[0].config.lag_model, listed.groups[0].config.lag_preset) == (
        InFlight(), PIPELINERL)
    assert [r.lag for r in listed.groups[0].runs] == [0.0] * 4 + [3.0] * 4


def test_presets_beside_models_name_their_groups():
    experiment = _experiment('[[lag]]\nmodel = "uniform"\nlevels = [0, 2]\n\n'
                             '[[lag]]\npreset = "prime_rl"\n\n[[lag]]\npreset = "areal"\n')
    assert [(g.name, g.config.lag_model, g.config.lag_preset) for g in experiment.groups] == [
        ("toy_reach-vaco-uniform-e2m2", LAG_MODELS["uniform"](), None),
        ("toy_reach-vaco-prime_rl-e2m2", Fixed(), PRIME_RL),
        ("toy_reach-vaco-areal-e2m2", Bounded(), AREAL)]


def test_a_tuning_group_runs_lag_0_under_fixed_without_the_preset():
    text = (TOY_EXPERIMENT.replace(LAG_TABLE, '[lag]\npreset = "areal"\n')
            .replace("buffer_capacity = 4", "buffer_capacity = 16")
            .replace("learning_rate = 1e-3\n", "")
            + '\n[tune]\nvalues = [1e-3, 3e-3]\nrule = "best_sync_final"\nseeds = 1\n')
    experiment = parse_experiment(text)
    tuning, study = experiment.groups
    assert (tuning.config.lag_model, tuning.config.lag_preset) == (Fixed(), None)
    assert (study.config.lag_model, study.config.lag_preset) == (Bounded(), AREAL)


@pytest.mark.parametrize("lag_tables, message", [
    ('[lag]\npreset = "arael"\n',
     f"[lag]: preset: unknown value(s) ['arael']; allowed: {PRESET_LIST}"),
    ('[lag]\nmodel = "areal"\nlevels = [4]\n',
     "[lag]: model: 'areal' is a lag preset; write preset = 'areal'"),
    ('[lag]\nmodel = "bounded"\npreset = "areal"\nlevels = [4]\n',
     "[lag]: needs either model (with levels) or preset, not both"),
    ('[lag]\nlevels = [4]\n', "[lag]: needs either model (with levels) or preset, not both"),
    ('[lag]\nmodel = "bounded"\n', "[lag]: needs both ['model', 'levels']"),
    ('[lag]\npreset = "pipelinerl"\n', "[lag]: lag preset 'pipelinerl' has no default level"),
    ('[[lag]]\npreset = "areal"\n\n[[lag]]\npreset = "open_instruct"\n',
     "[lag]: each lag model may appear once (list all its levels in one entry; a preset "
     "counts as its model), got 'bounded' in entries [0, 1]"),
    ('[lag]\npreset = "areal"\n', "lag for lag_model='bounded' must be an integer in [0, 3]"),
])
def test_a_bad_preset_entry_is_one_line_naming_the_key(lag_tables, message):
    text = TOY_EXPERIMENT.replace(LAG_TABLE, lag_tables)
    with pytest.raises(ValueError) as error:
        parse_experiment(text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_config_table_may_not_set_the_preset():
    text = TOY_EXPERIMENT.replace("[config]\n", '[config]\nlag_preset = "areal"\n')
    with pytest.raises(ValueError, match=r"\[config\]: lag_preset is set by \[lag\] preset"):
        parse_experiment(text)
