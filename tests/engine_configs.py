"""Tiny configurations shared by the engine tests (pure-JAX task, no physics compilation)."""

from vaco_jax.control.config import ControlConfig

TOY = ControlConfig(env="toy_reach", algo="ppo", num_envs=8, rollout_length=16,
                  total_steps=8 * 16 * 4, epochs=2, minibatches=2, buffer_capacity=4,
                  lag_model="uniform", episode_length=40, eval_every=2, num_eval_envs=4,
                  actor_hidden=(16,), critic_hidden=(16,))
