"""The driver's progress: compiling said and timed apart from training, said only by a driver
that compiles (not by one sharing another's programs, as a sweep's prefetched group does)."""

from engine_configs import TOY
from vaco_jax.control.config import ControlHParams
from vaco_jax.run.driver import Driver


def test_compiling_is_said_once_and_timed_apart_from_training(capsys):
    driver = Driver(TOY, ControlHParams.create(), [0, 1])
    result = driver.run(progress=True)
    err = capsys.readouterr().err
    assert err.startswith("compiling the training program ...\ncompiled in ")
    timing = result.timing
    assert timing.updates == TOY.num_updates
    assert timing.compile_seconds > 0 and timing.train_seconds > 0
    sharing = driver.with_runs(ControlHParams.create(), [2, 3]).run(progress=True)
    assert "compil" not in capsys.readouterr().err
    assert sharing.timing.updates == TOY.num_updates


def test_without_progress_nothing_is_said(capsys):
    Driver(TOY, ControlHParams.create(), [0]).run(progress=False)
    assert capsys.readouterr() == ("", "")
