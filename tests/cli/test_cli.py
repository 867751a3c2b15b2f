"""The `train` command's options reach the run's `ControlConfig`, bad values are refused, and the
command line imports matplotlib only to draw."""

import subprocess
import sys

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


def test_the_command_line_imports_matplotlib_only_to_draw():
    """matplotlib takes about a second to import: a command that writes no report or figure,
    and every child process of a sweep, skips it; writing a report still finds it."""
    code = ("import sys; import vaco_jax.cli; print('matplotlib' in sys.modules); "
            "from vaco_jax import report; report.write_report; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]


def test_a_sweep_loads_its_report_code_before_its_runs(monkeypatch, tmp_path):
    """A sweep writes its report hours after it starts; the code must be the one it started
    with, not whatever the checkout holds by then."""
    import vaco_jax.cli.sweep as sweep_cli
    loaded = []

    def fake_sweep(*args, **kwargs):
        loaded.append("vaco_jax.report.write" in sys.modules)
        raise SystemExit(0)

    monkeypatch.delitem(sys.modules, "vaco_jax.report.write", raising=False)
    monkeypatch.setattr(sweep_cli, "sweep", fake_sweep)
    with pytest.raises(SystemExit):
        cli.main(["sweep", "experiments/quick.toml", "--out", str(tmp_path / "sweep")])
    assert loaded == [True]
