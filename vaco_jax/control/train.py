"""The training program: rollouts from stale policies, optimisation phases, evaluation.

`make_train(config)` returns `train(key, hparams) -> (state, metrics)`, one pure function whose
loops are all `lax.scan`s, safe under `jax.jit(jax.vmap(train))` over seeds and any leaf of
`ControlHParams`. `ControlTrainer` exposes the same program in pieces (the contract of
`vaco_jax.core.trainer.Trainer`: `init`, `collect`, `update`, `evaluated`, `evaluate`, `run`)
for the chunked driver, which checkpoints between chunks.

One update = one rollout of `rollout_length` steps in each of `num_envs` environments, each
acting with its own behaviour policy from the policy buffer, followed by one optimisation phase
(`epochs x minibatches` gradient steps), after which the learner's policy is pushed into the
buffer. Every `updates_per_period` updates the learner is evaluated deterministically.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from vaco_jax import losses
from vaco_jax.core import phase
from vaco_jax.control.algorithms import (ALGORITHMS, MECHANISMS, SOFT_STABILISERS, PolicyTerms,
                                         ValueTerms)
from vaco_jax.control.config import ControlHParams, ControlConfig, adapts_kl_coef, validate
from vaco_jax.control.hparams import KL_COEF
from vaco_jax.core.divergence import freeze_if_diverged
from vaco_jax.core.trainer import Metrics, Trainer
from vaco_jax.control.envs import make_env
from vaco_jax.control.envs.episodes import EpisodeState, reset_episodes
from vaco_jax.control.networks import (ActorCritic, Policy, RunningStats, init_stats,
                                       update_stats, with_log_std)
from vaco_jax.core.policy_buffer import (PolicyBuffer, cond_in_every_run, from_initial_policy,
                                         init_buffer, make_behaviour, push)
from vaco_jax.control.reward_scaling import RewardScaling, init_reward_scaling, scale_rewards
from vaco_jax.control.rollout import Transitions, evaluate, rollout

# Divergence diagnostics (samples come from the behaviour policy beta; pi_T is the learner at
# the start of the phase):
# - `tv_backward` = TV(pi_T, beta) = 0.5 E_beta|pi_T/beta - 1|, over the whole phase batch.
# - `tv_forward` = TV(pi_theta, pi_T) and `approx_kl` = KL(pi_T || pi_theta), each sample
#   weighted by pi_T/beta (self-normalised), so they estimate divergences under pi_T itself;
#   `behaviour_kl` = KL(beta || pi_theta) = E_beta[r - 1 - log r], r = pi_theta/beta. These three
#   are taken before each gradient step and averaged over the phase's steps.
# - `*_median` and `*_p90`: median and 90th percentile of the per-sample deviations
#   0.5 |ratio - 1| (unweighted); for `tv_forward` the per-minibatch quantiles averaged over the
#   phase's steps, for `tv_backward` those of the whole phase batch.

# The stabilisers the losses declare, and the steps skipped for want of a kept sample.
STEP_MECHANISMS = (*MECHANISMS, phase.SKIPPED_STEP)
METRICS = ("env_steps", "episode_return", "eval_return", "version_gap_mean", "version_gap_max",
           "initial_policy_share", "tv_backward", "tv_backward_median", "tv_backward_p90",
           "tv_forward", "tv_forward_median", "tv_forward_p90", "approx_kl", "behaviour_kl",
           "ess_ratio", *STEP_MECHANISMS, *map(phase.acted_name, STEP_MECHANISMS),
           *SOFT_STABILISERS, "policy_loss", "value_loss", "entropy", "grad_norm", "kl_coef",
           "ess_lr_scale", "diverged")


@functools.cache
def algorithm_mechanisms(algo: str) -> frozenset[str]:
    """The stabilisers (`phase.MECHANISM_FRACTIONS`) whose fractions `algo`'s loss records; its
    runs record the others as NaN (as 0 in runs tables written before they did). KeyError for
    an algorithm the registry does not have."""
    loss = ALGORITHMS[algo].loss
    samples = jax.ShapeDtypeStruct((2,), jnp.float32)
    terms = PolicyTerms(log_prob=samples, behaviour_log_prob=samples, phase_log_prob=samples,
                        advantages=samples, tv_log_rho=samples, tv=None,
                        kl_coef=jax.ShapeDtypeStruct((), jnp.float32))
    return phase.recorded_mechanisms(lambda t: loss(t, ControlHParams()), terms)


@struct.dataclass
class ControlState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: optax.OptState
    obs_stats: RunningStats
    reward_scaling: RewardScaling
    buffer: PolicyBuffer
    episodes: EpisodeState
    per_actor_lags: jax.Array  # [E] int32, used by the `per_actor` lag model
    kl_coef: jax.Array
    key: jax.Array
    update: jax.Array  # int32, updates done
    env_steps: jax.Array  # int32
    diverged: jax.Array  # bool
    # int32, -1 if none: the number (1-based, as the run table's `update` column counts) of the
    # first update that produced a non-finite value; its metrics row is `diverged_at - 1`.
    diverged_at: jax.Array

    @property
    def policy(self) -> Policy:
        return Policy(self.params["actor"], self.obs_stats)


@struct.dataclass
class PhaseBatch:
    """The data of one optimisation phase, `[T, E, ...]`."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    discounts: jax.Array
    continuations: jax.Array
    truncated: jax.Array  # 1 where the time limit ended the episode (see `_next_values`)
    next_obs: jax.Array
    behaviour_log_prob: jax.Array
    phase_log_prob: jax.Array
    values: jax.Array  # phase-start values, the centre of value clipping
    advantages: jax.Array
    value_targets: jax.Array


def normalize_advantages(advantages: jax.Array, mode: str) -> jax.Array:
    if mode == "scale":
        return advantages / (advantages.std() + 1e-8)
    if mode == "standardize":
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return advantages


class ControlTrainer(Trainer[ControlConfig, ControlHParams, ControlState, Policy]):
    """The compiled-program pieces of one `ControlConfig` (validated before anything is traced)."""

    score = "eval_return"
    adam_eps = 1e-5

    def __init__(self, config: ControlConfig):
        validate(config)
        self.config = config
        self.algorithm = ALGORITHMS[config.algo]
        self.env = make_env(config.env, config.backend)
        self.model = ActorCritic(self.env.observation_size, self.env.action_size,
                                 config.actor_hidden, config.critic_hidden,
                                 config.normalize_observations, self.env.discrete,
                                 config.activation)

    # ----------------------------------------------------------------------------- set-up
    def learning_rate(self, hp: ControlHParams) -> optax.ScalarOrSchedule:
        if self.config.learning_rate_schedule == "constant":
            return hp.learning_rate
        cfg = self.config
        steps_per_update = cfg.phase_shape[0] * cfg.phase_shape[1]
        # Adam counts minibatch steps; the rate falls once per update, as PureJaxRL's does.
        return lambda count: hp.learning_rate * (
            1.0 - (count // steps_per_update) / cfg.num_updates)

    def gradient_clip(self, hp: ControlHParams) -> optax.GradientTransformation:
        if self.config.grad_clip == "per_network":
            return losses.clip_by_global_norm_per_subtree(hp.max_grad_norm)
        return super().gradient_clip(hp)

    def init(self, key: jax.Array, hp: ControlHParams) -> ControlState:
        cfg = self.config
        key, model_key, env_key, lag_key = jax.random.split(key, 4)
        actor_params, critic_params = self.model.init(model_key)
        if not self.env.discrete:
            actor_params = with_log_std(actor_params, hp.init_log_std)
        params = {"actor": actor_params, "critic": critic_params}
        stats = init_stats(self.env.observation_size)
        per_actor = cfg.lag_model.initial_per_actor_lags(lag_key, hp.lag, cfg.num_envs)
        episodes = reset_episodes(self.env, jax.random.split(env_key, cfg.num_envs))
        if cfg.restart_from == "first":
            episodes = episodes.replace(first_states=episodes.env)
        return ControlState(
            params=params,
            opt_state=self.optimizer(hp).init(params),
            obs_stats=stats,
            reward_scaling=init_reward_scaling(cfg.num_envs),
            buffer=init_buffer(Policy(actor_params, stats), cfg.buffer_capacity),
            episodes=episodes,
            per_actor_lags=per_actor,
            # Only an adaptive-KL algorithm reads its coefficient; the others report the default.
            kl_coef=jnp.asarray(hp.kl_coef if self.algorithm.adaptive_kl else KL_COEF.default,
                                jnp.float32),
            key=key,
            update=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
            diverged=jnp.zeros((), bool),
            diverged_at=jnp.full((), -1, jnp.int32),
        )

    # ----------------------------------------------------------------------------- phase
    def _value(self, params: dict, stats: RunningStats, obs: jax.Array) -> jax.Array:
        return self.model.value(params["critic"], stats, obs)

    @staticmethod
    def _value_terms(batch: PhaseBatch, values: jax.Array, next_values: jax.Array,
                     log_rho: jax.Array) -> ValueTerms:
        return ValueTerms(reward=batch.reward, values=values, next_values=next_values,
                          discounts=batch.discounts, continuations=batch.continuations,
                          log_rho=log_rho)

    def _next_values(self, params: dict, stats: RunningStats, values: jax.Array,
                     next_obs: jax.Array, truncated: jax.Array) -> jax.Array:
        """`V(next_obs)` `[T, ...]` for the time-major `next_obs`, given `values = V(obs)`.

        `next_obs[t]` is `obs[t + 1]` unless the episode ended at `t`; a terminated step's next
        value is discounted to 0, so only the last step and truncated steps need the critic on
        their own next observation. The full pass over `next_obs` runs only where some step was
        truncated, and even then only truncated steps take its values, so a run's numbers do not
        depend on which branch ran.
        """
        last = self._value(params, stats, next_obs[-1])
        shifted = jnp.concatenate([values[1:], last[None]])
        time_limit = truncated > 0

        def with_truncated(_):
            return jnp.where(time_limit, self._value(params, stats, next_obs), shifted)

        return cond_in_every_run(~jnp.any(time_limit), lambda _: shifted, with_truncated, None)

    def phase_batch(self, state: ControlState, data: Transitions, hp: ControlHParams) -> PhaseBatch:
        # Where every step acted with the newest version, the behaviour policy is the learner's
        # own policy pi_T: its rollout log-probs are the phase log-probs, no second pass needed.
        phase_log_prob = cond_in_every_run(
            jnp.all(data.behaviour_version == state.buffer.latest_version),
            lambda _: data.behaviour_log_prob,
            lambda _: self.model.log_prob(state.policy, data.obs, data.action), None)
        values = self._value(state.params, state.obs_stats, data.obs)
        next_values = self._next_values(state.params, state.obs_stats, values, data.next_obs,
                                        data.truncated)
        batch = PhaseBatch(obs=data.obs, action=data.action, reward=data.reward,
                           discounts=hp.gamma * (1.0 - data.terminated),
                           continuations=1.0 - data.done, truncated=data.truncated,
                           next_obs=data.next_obs,
                           behaviour_log_prob=data.behaviour_log_prob,
                           phase_log_prob=phase_log_prob, values=values,
                           advantages=jnp.zeros_like(values), value_targets=jnp.zeros_like(values))
        estimator = self.algorithm.advantages
        if estimator.per_minibatch:  # recomputed in the loss from the current parameters
            return batch
        adv, targets = estimator.estimate(self._value_terms(
            batch, values, next_values, phase_log_prob - data.behaviour_log_prob), hp)
        return batch.replace(advantages=adv, value_targets=targets)

    def _tv_reference_log_prob(self, mb: PhaseBatch) -> jax.Array:
        return mb.phase_log_prob if self.config.tv_reference == "phase" else mb.behaviour_log_prob

    def _tv_log_rho(self, log_prob, mb: PhaseBatch) -> jax.Array:
        return log_prob - self._tv_reference_log_prob(mb)

    def _filter_tv(self, log_prob, mb: PhaseBatch) -> jax.Array:
        """The TV estimate VACO's filter compares with `tv_delta` (`tv_estimator`)."""
        log_rho = self._tv_log_rho(log_prob, mb)
        if self.config.tv_estimator == "weighted":
            return losses.weighted_tv_estimate(
                log_rho, self._tv_reference_log_prob(mb) - mb.behaviour_log_prob)
        return losses.tv_estimate(log_rho)

    def minibatch_advantages(self, params: dict, mb: PhaseBatch, stats: RunningStats,
                             hp: ControlHParams) -> tuple[jax.Array, jax.Array]:
        """Advantages and value targets a minibatch step uses (before normalisation): fixed at
        phase start, except for a `per_minibatch` estimator, which recomputes them from
        `params`."""
        estimator = self.algorithm.advantages
        if not estimator.per_minibatch:
            return mb.advantages, mb.value_targets
        log_prob = self.model.log_prob(Policy(params["actor"], stats), mb.obs, mb.action)
        values = self._value(params, stats, mb.obs)
        next_values = self._next_values(params, stats, values, mb.next_obs, mb.truncated)
        return estimator.estimate(
            self._value_terms(mb, values, next_values, log_prob - mb.behaviour_log_prob), hp)

    def _loss(self, params: dict, mb: PhaseBatch, stats: RunningStats, kl_coef: jax.Array,
              tv: jax.Array | None, hp: ControlHParams):
        policy = Policy(params["actor"], stats)
        dist = self.model.distribution(policy, mb.obs)
        log_prob = self.model.policy_distribution.log_prob(dist, mb.action)
        values = self._value(params, stats, mb.obs)
        advantages, targets = self.minibatch_advantages(jax.lax.stop_gradient(params), mb, stats, hp)
        advantages = normalize_advantages(advantages, self.config.advantage_normalization)
        terms = PolicyTerms(log_prob=log_prob, behaviour_log_prob=mb.behaviour_log_prob,
                            phase_log_prob=mb.phase_log_prob, advantages=advantages,
                            tv_log_rho=self._tv_log_rho(log_prob, mb),
                            tv=self._filter_tv(log_prob, mb) if tv is None else tv,
                            kl_coef=kl_coef, filter_normalization=self.config.filter_normalization,
                            tv_delta_convention=self.config.tv_delta_convention)
        policy_loss, policy_metrics = self.algorithm.loss(terms, hp)
        # value_clip_eps = 0 switches clipping off: an infinite range leaves the values unclipped.
        clip_eps = jnp.where(hp.value_clip_eps > 0, hp.value_clip_eps, jnp.inf)
        value_loss, _ = losses.value_loss(values, targets, old_values=mb.values, clip_eps=clip_eps)
        entropy_loss, _ = losses.entropy_loss(self.model.policy_distribution.entropy(dist))
        total = policy_loss + hp.value_coef * value_loss + hp.entropy_coef * entropy_loss
        behaviour_ratio = jax.lax.stop_gradient(log_prob - mb.behaviour_log_prob)
        phase_ratio = jax.lax.stop_gradient(log_prob - mb.phase_log_prob)
        staleness = mb.phase_log_prob - mb.behaviour_log_prob
        forward_median, forward_p90 = losses.median_and_p90(losses.ratio_deviation(phase_ratio))
        metrics = {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": -entropy_loss,
            # NaN where the algorithm has no such mechanism (`phase.MECHANISM_FRACTIONS`).
            **{name: policy_metrics.get(name, jnp.full((), jnp.nan))
               for name in MECHANISMS + SOFT_STABILISERS},
            phase.KEPT: policy_metrics.get(phase.KEPT),
            "tv_forward": losses.weighted_tv_estimate(phase_ratio, staleness),
            "tv_forward_median": forward_median,
            "tv_forward_p90": forward_p90,
            "approx_kl": losses.weighted_kl_estimate(phase_ratio, staleness),
            "behaviour_kl": jnp.mean(jnp.expm1(behaviour_ratio) - behaviour_ratio),
            "ess_ratio": losses.ess_ratio(staleness),
        }
        return total, metrics

    def _minibatches(self, batch: PhaseBatch, key: jax.Array) -> PhaseBatch:
        """Shuffles the phase batch into `[M, ...]` minibatches."""
        cfg = self.config
        m = cfg.phase_shape[1]
        if self.algorithm.minibatch_over_envs:
            order = jax.random.permutation(key, cfg.num_envs)

            def split_envs(x):
                x = x[:, order].reshape((x.shape[0], m, -1) + x.shape[2:])
                return jnp.swapaxes(x, 0, 1)
            return jax.tree.map(split_envs, batch)
        order = jax.random.permutation(key, cfg.steps_per_update)

        def split_samples(x):
            flat = x.reshape((cfg.steps_per_update,) + x.shape[2:])[order]
            return flat.reshape((m, -1) + x.shape[2:])
        return jax.tree.map(split_samples, batch)

    def _batch_tv(self, params: dict, batch: PhaseBatch, stats: RunningStats) -> jax.Array:
        log_prob = self.model.log_prob(Policy(params["actor"], stats), batch.obs, batch.action)
        return self._filter_tv(log_prob, batch)

    def _optimise(self, state: ControlState, batch: PhaseBatch, key: jax.Array, hp: ControlHParams):
        tx = self.optimizer(hp)
        grad_fn = jax.value_and_grad(self._loss, has_aux=True)

        def minibatch_step(carry, mb):
            params, opt_state = carry
            # `batch` scope: the whole phase batch's TV under the current parameters, every step.
            tv = (self._batch_tv(params, batch, state.obs_stats)
                  if self.config.tv_scope == "batch" else None)
            (_, metrics), grads = grad_fn(params, mb, state.obs_stats, state.kl_coef, tv, hp)
            extra = ({"ess": metrics["ess_ratio"], "ess_target": hp.ess_target}
                     if self.algorithm.ess_scaling else {})
            # The ESS step factor where it scales the step, NaN elsewhere (as on tokens).
            metrics["ess_lr_scale"] = losses.ess_step_scale(**extra) if extra else jnp.nan
            params, opt_state, _, metrics[phase.SKIPPED_STEP] = phase.optimiser_step(
                tx, grads, opt_state, params, metrics.pop(phase.KEPT), **extra)
            metrics["grad_norm"] = optax.global_norm(grads)
            return (params, opt_state), metrics

        (params, opt_state), metrics = phase.scan_epochs(
            minibatch_step, (state.params, state.opt_state),
            lambda epoch_key: self._minibatches(batch, epoch_key), key,
            self.config.phase_shape[0])
        return params, opt_state, {**jax.tree.map(jnp.mean, metrics),
                                   **phase.acted_shares(metrics)}

    def phase_kl(self, state: ControlState, params: dict, batch: PhaseBatch) -> jax.Array:
        """KL(pi_T || pi_T+1) between the learner before and after a phase, on its batch.

        The KL the adaptive penalty rule is defined on: it measures the phase's own step, which
        the penalty controls, and none of the backward lag KL(beta || pi_T), which no step can
        remove. The samples come from the behaviour policies, so each is weighted by
        `pi_T / beta`, self-normalised (`losses.weighted_kl_estimate`). Both policies use the
        phase's normaliser statistics: the KL is that of the optimisation alone.
        """
        log_prob = self.model.log_prob(Policy(params["actor"], state.obs_stats), batch.obs,
                                       batch.action)
        chex.assert_equal_shape([log_prob, batch.phase_log_prob, batch.behaviour_log_prob])
        return losses.weighted_kl_estimate(log_prob - batch.phase_log_prob,
                                           batch.phase_log_prob - batch.behaviour_log_prob)

    # ----------------------------------------------------------------------------- update
    def collect(self, state: ControlState, key: jax.Array,
                hp: ControlHParams) -> tuple[ControlState, Transitions]:
        """One rollout, each environment acting with the behaviour policy its lag selects."""
        cfg = self.config
        lag_key, rollout_key = jax.random.split(key)
        lags = cfg.lag_model.draw(lag_key, hp.lag, state.buffer, state.per_actor_lags,
                                  cfg.lag_warmup, cfg.rollout_length)
        behaviour = make_behaviour(state.buffer, lags, cfg.acting)
        episodes, data = rollout(self.env, self.model, behaviour, state.episodes, rollout_key,
                                 length=cfg.rollout_length, episode_length=cfg.episode_length,
                                 acting=cfg.acting)
        return state.replace(episodes=episodes), data

    def scale_rewards(self, scaling: RewardScaling, data: Transitions,
                      hp: ControlHParams) -> tuple[RewardScaling, Transitions]:
        """The learner's view of the rollout: rewards divided by the return scale if configured."""
        if self.config.reward_scaling == "none":
            return scaling, data
        scaling, reward = scale_rewards(scaling, data.reward, data.done, hp.gamma)
        return scaling, data.replace(reward=reward)

    def update(self, state: ControlState, hp: ControlHParams) -> tuple[ControlState, Metrics]:
        """One rollout and one optimisation phase; a non-finite result freezes the run."""
        cfg = self.config
        key, collect_key, optimise_key = jax.random.split(state.key, 3)
        collected, data = self.collect(state, collect_key, hp)
        reward_scaling, data = self.scale_rewards(state.reward_scaling, data, hp)
        batch = self.phase_batch(state, data, hp)
        params, opt_state, metrics = self._optimise(state, batch, optimise_key, hp)

        obs_stats = update_stats(state.obs_stats, data.obs) if cfg.normalize_observations \
            else state.obs_stats
        kl_coef = state.kl_coef
        if adapts_kl_coef(cfg):
            kl_coef = losses.adaptive_kl_coef(kl_coef, self.phase_kl(state, params, batch),
                                              hp.kl_target, hp.kl_coef_min, hp.kl_coef_max)
        new_state = state.replace(
            params=params, opt_state=opt_state, obs_stats=obs_stats, reward_scaling=reward_scaling,
            buffer=push(state.buffer, Policy(params["actor"], obs_stats)),
            episodes=collected.episodes, kl_coef=kl_coef, key=key, update=state.update + 1,
            env_steps=state.env_steps + cfg.steps_per_update)

        staleness = batch.phase_log_prob - batch.behaviour_log_prob
        backward_median, backward_p90 = losses.median_and_p90(losses.ratio_deviation(staleness))
        version_gap = (state.buffer.latest_version - data.behaviour_version).astype(jnp.float32)
        finished = data.done.sum()
        metrics.update(
            env_steps=new_state.env_steps.astype(jnp.float32),
            episode_return=jnp.where(finished > 0,
                                     data.completed_return.sum() / jnp.maximum(finished, 1.0),
                                     jnp.nan),
            version_gap_mean=version_gap.mean(),
            version_gap_max=version_gap.max(),
            initial_policy_share=from_initial_policy(data.behaviour_version).mean(),
            tv_backward=losses.tv_estimate(staleness), tv_backward_median=backward_median,
            tv_backward_p90=backward_p90, kl_coef=kl_coef)
        # The normaliser statistics and the reward scale are read by the next update too.
        checked = (params, opt_state, obs_stats, reward_scaling, metrics["policy_loss"],
                   metrics["value_loss"])
        return freeze_if_diverged(state, new_state, checked, metrics)

    # ----------------------------------------------------------------------------- evaluation
    def evaluated(self, state: ControlState) -> Policy:
        return state.policy

    def evaluate(self, policy: Policy, key: jax.Array) -> jax.Array:
        """Mean deterministic return of the learner's policy on separate environments."""
        return evaluate(self.env, self.model, policy, key, num_envs=self.config.num_eval_envs,
                        episode_length=self.config.episode_length)


def make_train(config: ControlConfig):
    """Returns `train(key, hparams) -> (state, metrics)` for `config` (validated now)."""
    return ControlTrainer(config).train
