"""Tiny configurations shared by the engine tests (pure-JAX task, no physics compilation)."""

from vaco_jax.control.config import ControlConfig
from vaco_jax.core.lag_models import Uniform

TOY = ControlConfig(env="toy_reach", algo="ppo", num_envs=8, rollout_length=16,
                  total_steps=8 * 16 * 4, epochs=2, minibatches=2, buffer_capacity=4,
                  lag_model=Uniform(), episode_length=40, eval_every=2, num_eval_envs=4,
                  actor_hidden=(16,), critic_hidden=(16,))

TOY_EXPERIMENT = """\
name = "toy"
description = "tiny toy sweep"
tasks = ["toy_reach"]
algos = ["vaco"]
seeds = 2

[lag]
model = "uniform"
levels = [0, 2]

[forward]
epochs = 2
minibatches = 2

[config]
num_envs = 8
rollout_length = 16
total_steps = 512
buffer_capacity = 4
episode_length = 40
eval_every = 2
num_eval_envs = 4
actor_hidden = [16]
critic_hidden = [16]

[hparams]
learning_rate = 1e-3
tv_delta = [0.1, 0.3]
"""
"""The text of a tiny sweep on `toy_reach`: one group of 8 runs."""

TINY_SWEEP = """\
name = "tiny"
description = "tiny"
tasks = ["toy_reach"]
algos = ["ppo"]
seeds = 1

[lag]
model = "fixed"
levels = [0]

[config]
num_envs = 8
rollout_length = 16
total_steps = 256
buffer_capacity = 4
episode_length = 40
eval_every = 2
num_eval_envs = 4
actor_hidden = [16]
critic_hidden = [16]
"""
"""The text of a smaller sweep on `toy_reach`: one run of 2 updates, one program."""
