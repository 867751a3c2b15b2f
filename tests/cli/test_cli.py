"""The `train` command's options reach the run's `ControlConfig`, and bad values are refused."""

import pytest

from vaco_jax import cli
from vaco_jax.run import driver

ARGS = ["train", "--env", "toy_reach", "--no-progress"]


class _Recorded(Exception):
    pass


@pytest.mark.parametrize("flag,field,value", [("--lag-warmup", "lag_warmup", "redraw"),
                                              ("--filter-normalization", "filter_normalization",
                                               "kept")])
def test_train_options_reach_the_config(monkeypatch, tmp_path, flag, field, value):
    recorded = {}

    def record(config, hparams, seeds):
        recorded["config"] = config
        raise _Recorded

    monkeypatch.setattr(driver, "Driver", record)
    with pytest.raises(_Recorded):
        cli.main([*ARGS, flag, value, "--out", str(tmp_path / "run")])
    assert getattr(recorded["config"], field) == value


@pytest.mark.parametrize("flag,message", [
    ("--lag-warmup", "lag_warmup='bogus' is not supported; allowed values: clip, redraw"),
    ("--filter-normalization",
     "filter_normalization='bogus' is not supported; allowed values: all, kept")])
def test_train_refuses_an_unknown_value_naming_the_field(tmp_path, capsys, flag, message):
    assert cli.main([*ARGS, flag, "bogus", "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
