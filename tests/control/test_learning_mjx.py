"""Learning on MJX physics: `ppo` and `vaco` must clearly beat the initial policy.

The only tests that compile MJX training programs; each runs in a few minutes on 2 CPU cores.
"""

import pytest

from vaco_jax.control.config import ControlHParams, ControlConfig
from vaco_jax.core.lag_models import Uniform
from vaco_jax.run.driver import Driver

CONFIG = ControlConfig(env="inverted_pendulum", num_envs=32, rollout_length=64, total_steps=80_000,
                     epochs=4, minibatches=4, buffer_capacity=4, lag_model=Uniform(),
                     episode_length=500, eval_every=10, num_eval_envs=8,
                     actor_hidden=(32, 32), critic_hidden=(32, 32))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "vaco"])
def test_learns_inverted_pendulum_under_lag(algo):
    hparams = ControlHParams.create(lag=2.0, learning_rate=1e-3)
    result = Driver(CONFIG.replace(algo=algo), hparams, [0, 1]).run(progress=False)
    evals = result.metrics["eval_return"]
    initial = evals[:, 0]
    final = evals[:, -1]
    assert not result.diverged.any()
    assert (initial < 50).all(), initial  # a random policy drops the pole within a few dozen steps
    assert (final > initial + 100).all(), (initial, final)
