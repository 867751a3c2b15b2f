"""Rollouts: every environment steps with its own behaviour policy inside one `lax.scan`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.control.envs import Environment, EnvState
from vaco_jax.control.envs.episodes import (EpisodeState, reset_episodes, restart_states,
                                            step_episodes, where_done)
from vaco_jax.control.networks import ActorCritic
from vaco_jax.core.policy_buffer import Behaviour, cond_in_every_run, make_behaviour, newest


@struct.dataclass
class Transitions:
    """One rollout, time-major: leaves `[T, E, ...]`."""

    obs: jax.Array
    action: jax.Array  # Gaussian: unclipped sample (the environment received it clipped to
    # [-1, 1]), `[T, E, A]`; categorical: int32 index, `[T, E]`
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: jax.Array  # true next observation, the final one where the episode ended
    behaviour_log_prob: jax.Array  # under the step's own behaviour policy
    behaviour_version: jax.Array  # int32, the step's own behaviour version
    completed_return: jax.Array  # finished episode's return where it ended, else 0

    @property
    def done(self) -> jax.Array:
        return jnp.maximum(self.terminated, self.truncated)


def behaviour_distribution(model: ActorCritic, behaviour: Behaviour, obs: jax.Array,
                           acting: str) -> tuple[jax.Array, ...]:
    """Action distribution of each environment's own behaviour policy for `obs` `[E, obs]`.

    When every environment acts with the newest policy the shared-policy branch runs, which is
    exactly the synchronous computation, so lag 0 reproduces synchronous training bit for bit.
    """
    def shared(_):
        return model.distribution(newest(behaviour.buffer), obs)

    def per_environment(_):
        if acting == "gather":
            return jax.vmap(model.distribution)(behaviour.gathered, obs)
        # `select`: every snapshot acts on every environment, each keeps its own policy's output.
        every = jax.vmap(model.distribution, in_axes=(0, None))(behaviour.buffer.policies, obs)
        pick = lambda x: jnp.take_along_axis(x, behaviour.slots[None, :, None], axis=0)[0]
        return jax.tree.map(pick, every)

    all_newest = jnp.all(behaviour.versions == behaviour.buffer.latest_version)
    return cond_in_every_run(all_newest, shared, per_environment, None)


def rollout(env: Environment, model: ActorCritic, behaviour: Behaviour, episodes: EpisodeState,
            key: jax.Array, *, length: int, episode_length: int,
            acting: str) -> tuple[EpisodeState, Transitions]:
    reset_key, step_key = jax.random.split(key)
    # Stochastic tasks' own keys, from a root of their own: the resets and the action noise keep
    # the keys they always had, and no key is derived from one already used.
    env_root = jax.random.fold_in(key, 2)
    num_envs = episodes.step_count.shape[0]
    restarts = restart_states(env, episodes, reset_key)
    distribution = model.policy_distribution
    # `in_flight`: versions `[T, E]`, the behaviour policy changes during the rollout.
    per_step = behaviour.versions.ndim == 2
    step_versions = behaviour.versions if per_step else jnp.zeros((length, 0), jnp.int32)

    def step(state: EpisodeState, xs: tuple[jax.Array, jax.Array, jax.Array]):
        noise_key, env_key, versions = xs
        lags = behaviour.buffer.latest_version - versions
        step_behaviour = make_behaviour(behaviour.buffer, lags, acting) if per_step else behaviour
        obs = state.env.obs
        dist = behaviour_distribution(model, step_behaviour, obs, acting)
        action = distribution.sample(dist, noise_key)
        log_prob = distribution.log_prob(dist, action)
        state, outcome = step_episodes(env, state, distribution.env_action(action),
                                       jax.random.split(env_key, num_envs),
                                       restarts, episode_length)
        record = Transitions(obs=obs, action=action, reward=outcome.reward,
                             terminated=outcome.terminated, truncated=outcome.truncated,
                             next_obs=outcome.next_obs, behaviour_log_prob=log_prob,
                             behaviour_version=step_behaviour.versions,
                             completed_return=outcome.completed_return)
        return state, record

    return jax.lax.scan(step, episodes, (jax.random.split(step_key, length),
                                         jax.random.split(env_root, length), step_versions))


def evaluate(env: Environment, model: ActorCritic, policy, key: jax.Array, *, num_envs: int,
             episode_length: int) -> jax.Array:
    """Mean undiscounted return of one deterministic episode (the Gaussian's mean, the most
    probable discrete action) per environment."""
    _, returns = evaluation_episodes(env, model, policy, key, num_envs=num_envs,
                                     episode_length=episode_length)
    return returns.mean()


def evaluation_episodes(env: Environment, model: ActorCritic, policy, key: jax.Array, *,
                        num_envs: int, episode_length: int) -> tuple[EnvState, jax.Array]:
    """One deterministic episode per environment, all run until the last ends: the state each
    ended in (its terminal state, or its state at `episode_length`) and its undiscounted
    return."""
    states = reset_episodes(env, jax.random.split(key, num_envs)).env
    distribution = model.policy_distribution
    # Stochastic tasks' keys: `split(key, n)[i]` is `fold_in(key, i)`, so index `num_envs` is
    # a root no reset used.
    step_key = jax.random.fold_in(key, num_envs)

    def cond(carry):
        _, _, finished, t = carry
        return (t < episode_length) & ~jnp.all(finished)

    def body(carry):
        states, returns, finished, t = carry
        action = distribution.mode(model.distribution(policy, states.obs))
        env_keys = jax.random.split(jax.random.fold_in(step_key, t), num_envs)
        stepped = jax.vmap(env.step)(states, distribution.env_action(action), env_keys)
        returns = returns + jnp.where(finished, 0.0, stepped.reward)
        # A finished environment stays at its last state. Stepped on past its end, a fallen
        # MJX body can blow up (`inverted_double_pendulum`'s observations reach 1e27 within
        # 150 steps of bang-bang pushing) and its constraint solver's iterations with it: the
        # vmapped loop then pays the slowest environment's cost, up to 50 times a normal step.
        states = where_done(finished, states, stepped)
        finished = finished | (stepped.terminated > 0)
        return states, returns, finished, t + 1

    init = (states, jnp.zeros(num_envs), jnp.zeros(num_envs, bool), jnp.zeros((), jnp.int32))
    states, returns, _, _ = jax.lax.while_loop(cond, body, init)
    return states, returns
