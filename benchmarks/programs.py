"""The jitted programs the benchmarks time, all `vmap`-ed over seeds like the driver's.

- `env_program`: the task alone with uniformly random actions, stepped exactly as a rollout
  steps it (the engine's adapter, `step_episodes` auto-reset, one batch of reset states per
  rollout), so its rate is the physical limit of training with the same environments.
- `train_program`: `updates` calls of `ControlTrainer.update` in one `lax.scan`, the same body that
  `ControlTrainer.run` scans between evaluations; evaluation is timed apart (`eval_program`).
- `collect_program`: the rollouts of those updates alone (`ControlTrainer.collect`: lags, behaviour
  policies, acting and stepping), so that training time splits into environment, acting and
  learning.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from benchmarks.harness import Program
from vaco_jax.control.config import ControlHParams, ControlConfig
from vaco_jax.control.envs.episodes import EpisodeState, restart_states, step_episodes
from vaco_jax.control.train import ControlTrainer
from vaco_jax.core.lag_models import Fixed


def seed_keys(num_seeds: int) -> jax.Array:
    return jax.vmap(jax.random.PRNGKey)(jnp.arange(num_seeds, dtype=jnp.uint32))


def hparams_for(config: ControlConfig, num_seeds: int, **values: float) -> ControlHParams:
    """Default hyper-parameters for `num_seeds` runs; lag `K - 1` for every non-fixed lag model
    (per-environment lags spread over the whole buffer), 0 for `fixed` (synchronous)."""
    lag = 0.0 if isinstance(config.lag_model, Fixed) else float(config.buffer_capacity - 1)
    hp = ControlHParams.create(**{"lag": lag, **values})
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_seeds,)), hp)


def initial_state(config: ControlConfig, num_seeds: int,
                  abstract: bool = False) -> tuple[ControlTrainer, ControlHParams, Any]:
    """A trainer of `config` and the initial training state of `num_seeds` runs. Every program
    of one config starts from this same state (and its compiled `init` program is shared through
    the benchmark run's compilation cache). `abstract`: the state's shapes and dtypes only
    (`jax.ShapeDtypeStruct`s, nothing computed or allocated), enough to lower and compile a
    program without running it (`benchmarks/roofline.py`)."""
    trainer = ControlTrainer(config)
    hp = hparams_for(config, num_seeds)
    init = jax.vmap(trainer.init)
    keys = seed_keys(num_seeds)
    return trainer, hp, jax.eval_shape(init, keys, hp) if abstract else jax.jit(init)(keys, hp)


def env_program(config: ControlConfig, num_seeds: int, updates: int,
                abstract: bool = False) -> Program:
    """`updates` rollouts' worth of random-action steps of `config`'s environments (`abstract`:
    arguments are shapes only, see `initial_state`)."""
    trainer, _, state = initial_state(config, num_seeds, abstract)
    env, num_envs, length = trainer.env, config.num_envs, config.rollout_length

    def one_rollout(episodes: EpisodeState, key: jax.Array):
        reset_key, step_key = jax.random.split(key)
        resets = restart_states(env, episodes, reset_key)

        def step(episodes: EpisodeState, keys: tuple[jax.Array, jax.Array]):
            action_key, env_key = keys
            if env.discrete:
                actions = jax.random.randint(action_key, (num_envs,), 0, env.action_size)
            else:
                actions = jax.random.uniform(action_key, (num_envs, env.action_size),
                                             minval=-1.0, maxval=1.0)
            episodes, outcome = step_episodes(env, episodes, actions,
                                              jax.random.split(env_key, num_envs), resets,
                                              config.episode_length)
            # Returned so that no part of the step (rewards, flags) is dead code.
            return episodes, outcome.reward.sum() + outcome.terminated.sum()

        # The environments' keys from a root of their own (`split(key, 2)` took indices 0, 1).
        step_keys = (jax.random.split(step_key, length),
                     jax.random.split(jax.random.fold_in(key, 2), length))
        episodes, totals = jax.lax.scan(step, episodes, step_keys)
        return episodes, totals.sum()

    def chunk(episodes: EpisodeState, key: jax.Array):
        key, *rollout_keys = jax.random.split(key, updates + 1)
        episodes, totals = jax.lax.scan(one_rollout, episodes, jnp.stack(rollout_keys))
        return episodes, key, totals.sum()

    return Program(fn=jax.jit(jax.vmap(chunk)), args=(state.episodes, seed_keys(num_seeds)),
                   advance=lambda args, out: (out[0], out[1]),
                   steps_per_call=num_seeds * updates * config.steps_per_update)


def train_program(config: ControlConfig, num_seeds: int, updates: int,
                  abstract: bool = False) -> Program:
    """`updates` training updates of `num_seeds` runs of `config` per call (`abstract`: arguments
    are shapes only, see `initial_state`)."""
    trainer, hp, state = initial_state(config, num_seeds, abstract)

    def chunk(state, hp):
        return jax.lax.scan(lambda s, _: trainer.update(s, hp), state, None, length=updates)

    return Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                   advance=lambda args, out: (out[0], args[1]),
                   steps_per_call=num_seeds * updates * config.steps_per_update)


def collect_program(config: ControlConfig, num_seeds: int, updates: int,
                    state: Any | None = None, abstract: bool = False) -> Program:
    """`updates` rollouts per call from `state` (default: the initial state, shapes only if
    `abstract`). Nothing is pushed into the policy buffer, so a `state` taken from training
    keeps its versions and lags."""
    trainer, hp = ControlTrainer(config), hparams_for(config, num_seeds)
    if state is None:
        _, _, state = initial_state(config, num_seeds, abstract)

    def chunk(state, hp):
        def one(state, _):
            key, collect_key = jax.random.split(state.key)
            collected, data = trainer.collect(state, collect_key, hp)
            # Returned so that no recorded field is dead code.
            summary = sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(data))
            return collected.replace(key=key), summary
        return jax.lax.scan(one, state, None, length=updates)

    return Program(fn=jax.jit(jax.vmap(chunk)), args=(state, hp),
                   advance=lambda args, out: (out[0], args[1]),
                   steps_per_call=num_seeds * updates * config.steps_per_update)


def eval_program(config: ControlConfig, num_seeds: int, updates: int = 0) -> Program:
    """One evaluation (`num_eval_envs` deterministic episodes) of the initial policy; its
    `steps_per_call` is an upper bound (episodes may end before `episode_length`). `updates` is
    unused (the signature is that of the other programs)."""
    del updates
    trainer, _, state = initial_state(config, num_seeds)
    return Program(fn=jax.jit(jax.vmap(trainer.evaluate)),
                   args=(trainer.evaluated(state), seed_keys(num_seeds)),
                   advance=lambda args, out: args,
                   steps_per_call=num_seeds * config.num_eval_envs * config.episode_length)
