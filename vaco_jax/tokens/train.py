"""A token algorithm (GRPO and its stabilisers) from stale generators on a token task, as one
compiled program.

`make_train(config)` returns `train(key, hparams) -> (state, metrics)`; every loop is a
`lax.scan`, so `jax.jit(jax.vmap(train))` runs seeds and hyper-parameters together.

One update: `P` training prompts, `G` responses each. Every generator (a prompt group or a single
sample, `group_unit`) draws a lag from the lag model and generates with the policy of that
version from the policy buffer, recording each token's behaviour version and log-prob
(optionally computed in bfloat16); under `in_flight` the version changes while a sequence is
decoded. Rewards are verified, advantages are group-relative, and `epochs x minibatches` steps
of the configured algorithm's surrogate follow (`vaco_jax.tokens.algorithms`; GRPO's is
token-level PPO-clip on the behaviour ratio); the learner's parameters are then pushed into the
buffer. A run whose update turns non-finite is frozen (`vaco_jax.core.divergence`).
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
from vaco_jax.core.divergence import freeze_if_diverged
from vaco_jax.core.lag_models import refuse_stale
from vaco_jax.core.policy_buffer import (PolicyBuffer, cond_in_every_run, from_initial_policy,
                                         init_buffer, push)
from vaco_jax.core.trainer import Metrics, Trainer
from vaco_jax.tokens import replay, tasks
from vaco_jax.tokens.algorithms import ALGORITHMS, STABILISER_METRICS
from vaco_jax.tokens.config import TokenConfig, TokenHParams, validate
from vaco_jax.tokens.evaluation import greedy_accuracy, held_out_set
from vaco_jax.tokens.model import Params, Samples, TokenPolicy, to_bfloat16
from vaco_jax.tokens.replay import ReplayStore, empty_store
from vaco_jax.tokens.surrogates import AdvantageInputs, TokenTerms
from vaco_jax.tokens.vcpo import sequence_grad_sq_norms
from vaco_jax.tokens.warm_start import SupervisedStart

METRICS = ("reward_mean", "eval_accuracy", "response_length", "entropy", "version_gap_mean",
           "version_gap_max", "initial_policy_share", "tv_backward", "tv_forward", "ess_ratio",
           # the median and 99th percentile of the batch's sequence log-ratios log(pi_T / beta)
           # (`sequence_log_staleness`): the heavy tail the sequence-level corrections act on
           "sequence_log_ratio_median", "sequence_log_ratio_p99",
           "grad_norm", "behaviour_kl", "approx_kl", "effective_learning_rate", "policy_loss",
           "diverged",
           # the ESS learning-rate factor sqrt(min(1, ess / ess_target)), NaN without ESS scaling
           "ess_lr_scale", phase.SKIPPED_STEP) + STABILISER_METRICS + tuple(
               phase.acted_name(m) for m in phase.MECHANISM_FRACTIONS)


@functools.cache
def algorithm_mechanisms(algo: str) -> frozenset[str]:
    """The stabilisers (`phase.MECHANISM_FRACTIONS`) whose fractions `algo`'s loss records; its
    runs record the others as NaN (as 0 in runs tables written before they did). KeyError for
    an algorithm the registry does not have. An algorithm with a rollout correction is traced
    with it on, so that its truncation counts among its stabilisers."""
    algorithm = ALGORITHMS[algo]
    loss = algorithm.policy_loss
    tokens = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    sequences = jax.ShapeDtypeStruct((2,), jnp.float32)
    terms = TokenTerms(log_prob=tokens, behaviour_log_prob=tokens, phase_log_prob=tokens,
                       advantages=sequences, mask=tokens, version_gap=tokens,
                       group=jax.ShapeDtypeStruct((2,), jnp.int32), reward=sequences,
                       reference_log_prob=tokens,
                       rollout_is="token" if algorithm.rollout_correction else "none")
    recorded = phase.recorded_mechanisms(lambda t: loss(t, TokenHParams()), terms)
    return recorded | {STALE_REFUSED} if algorithm.refuses_stale else recorded


# The metric in which an algorithm that refuses stale generations at collection reports them.
STALE_REFUSED = "stale_dropped_fraction"


@struct.dataclass
class TokenState:
    params: Params
    opt_state: optax.OptState
    buffer: PolicyBuffer  # past parameters, leaves [K, ...]
    per_actor_lags: jax.Array  # [generators] int32, for the `per_actor` lag model
    key: jax.Array
    update: jax.Array  # int32, updates done
    diverged: jax.Array  # bool
    diverged_at: jax.Array  # int32, 1-based number of the first non-finite update, -1 if none
    reference: Params | None = None  # the warm start's parameters, kept for algorithms that read them
    replay: ReplayStore | None = None  # the generated prompt groups, under `replay`


@struct.dataclass
class Batch:
    """One update's sequences `[N, ...]`, `N = P x G`, prompt-major."""

    prompt: jax.Array
    response: jax.Array
    mask: jax.Array
    behaviour_log_prob: jax.Array
    phase_log_prob: jax.Array
    advantages: jax.Array  # [N]
    reward: jax.Array  # [N]
    entropy: jax.Array  # behaviour entropy per token
    behaviour_version: jax.Array  # [N, L] int32, each token's own
    version_gap: jax.Array  # [N, L] float, versions between the phase's learner and each token
    group: jax.Array  # [N] int32, the prompt each sequence answers
    reference_log_prob: jax.Array | None  # under the reference policy, for algorithms that read it
    refused: jax.Array  # [N] 1.0 where the sequence replaced a generation refused as stale


def _kl(log_ratio: jax.Array, mask: jax.Array) -> jax.Array:
    """The `k3` estimate `E[r - 1 - log r]`, `r = exp(log_ratio)`, over valid tokens."""
    return losses.aggregate(jnp.expm1(log_ratio) - log_ratio, mask)


def sequence_log_staleness(phase_log_prob, behaviour_log_prob, mask) -> jax.Array:
    """Each sequence's `log(pi_T / beta)`, summed over its valid tokens: `[N]`."""
    return jnp.where(mask > 0, phase_log_prob - behaviour_log_prob, 0.0).sum(axis=-1)


class TokenTrainer(Trainer[TokenConfig, TokenHParams, TokenState, Params]):
    """The pieces of the program for one `TokenConfig` (validated before anything is traced).

    Its runs start from `initial_params`, the warm start's parameters, which the driver
    resolves before the first state (`vaco_jax.run.warm_start`: read from its cache or trained)
    and passes in, so `init` touches no disk. Built without them, it traces everything but
    `init`: planning a sweep or estimating its memory (`state_shapes`) trains nothing.
    """

    score = "eval_accuracy"
    evaluation_draws = False  # greedy decoding of fixed prompts
    pending_warm_start: SupervisedStart | None = None

    def __init__(self, config: TokenConfig, initial_params: Params | None = None):
        validate(config)
        self.config = config
        self.algorithm = ALGORITHMS[config.algo]
        self.task = config.task_spec
        self.unchecked = self.task.unchecked_steps(config.reward_on)
        self.policy = TokenPolicy(config.model_spec)
        self.eval_prompts, self.eval_answers = held_out_set(self.task, config.eval_prompts)
        self.initial_params = initial_params
        if initial_params is None:
            self.pending_warm_start = SupervisedStart(self.task, config.model_spec,
                                                      config.warm_start, config.warm_start_dir)

    def init(self, key: jax.Array, hp: TokenHParams) -> TokenState:
        if self.initial_params is None:
            raise ValueError("a token run starts from its warm start's parameters: build "
                             "TokenTrainer(config, initial_params) with them "
                             "(vaco_jax.run.warm_start resolves them)")
        return self._init_from(self.initial_params, key, hp)

    def state_shapes(self, key: jax.Array, hp: TokenHParams) -> TokenState:
        params = jax.eval_shape(self.policy.init, key)
        return jax.eval_shape(self._init_from, params, key, hp)

    def _init_from(self, params, key: jax.Array, hp: TokenHParams) -> TokenState:
        cfg = self.config
        key, lag_key = jax.random.split(key)
        per_actor = cfg.lag_model.initial_per_actor_lags(lag_key, hp.lag, cfg.generators)
        return TokenState(params=params, opt_state=self.optimizer(hp).init(params),
                          buffer=init_buffer(params, cfg.buffer_capacity),
                          per_actor_lags=per_actor, key=key,
                          update=jnp.zeros((), jnp.int32), diverged=jnp.zeros((), bool),
                          diverged_at=jnp.full((), -1, jnp.int32),
                          reference=params if self.algorithm.needs_reference else None,
                          replay=empty_store(cfg.replay_groups, self.task.prompt_length,
                                             cfg.group_size, cfg.response_length)
                          if cfg.replay else None)

    # ------------------------------------------------------------------------ generation
    def collect(self, state: TokenState, key: jax.Array,
                hp: TokenHParams) -> tuple[TokenState, Batch]:
        """Samples `P x G` responses, each generator acting with its own stale policy. The
        state is returned as it was (generators keep nothing between updates) but under
        `replay`, where the generation is written into the replay store and the batch drawn
        from it."""
        cfg = self.config
        if cfg.replay:
            key, replay_key = jax.random.split(key)
        prompt_key, lag_key, sample_key = jax.random.split(key, 3)
        prompts, answers = tasks.sample(self.task, prompt_key, cfg.prompts)
        prompt = jnp.repeat(prompts, cfg.group_size, axis=0)
        answer = jnp.repeat(answers, cfg.group_size, axis=0)
        versions, refused = self.behaviour_versions(state, lag_key, hp)
        samples = self._sample(state.buffer, versions, prompt, sample_key, hp)
        per_generator = cfg.batch_size // cfg.generators
        versions = jnp.repeat(versions, per_generator, axis=0)
        reward = self.reward(answer, samples.response)
        if cfg.replay:
            state, (prompt, samples, versions, reward) = self._replayed(
                state, prompts, samples, versions, reward, replay_key, hp)
        batch = self._batch(state, hp, prompt, samples, versions, reward)
        return state, batch.replace(refused=jnp.repeat(refused, per_generator))

    def reward(self, answer: jax.Array, response: jax.Array) -> jax.Array:
        """The verifier's reward `[N]` of responses `[N, L]` to the answers `[N, ...]`, as the
        config's `reward_on`, `partial_credit` and `format_penalty` set it."""
        cfg = self.config
        return tasks.reward(answer, response, unchecked=self.unchecked,
                            partial_credit=cfg.partial_credit, format_penalty=cfg.format_penalty)

    def _replayed(self, state: TokenState, prompts, samples: Samples, versions, reward,
                  key: jax.Array, hp: TokenHParams):
        """The update's generation written into the replay store, and the batch drawn from it
        (`vaco_jax.tokens.replay`): the state with the store, and the batch's prompts `[N, ...]`,
        samples, token versions and rewards."""
        cfg = self.config

        def by_group(x):  # [N, ...] -> [P, G, ...]
            return x.reshape((cfg.prompts, cfg.group_size) + x.shape[1:])

        def by_row(x):  # [P, G, ...] -> [N, ...]
            return x.reshape((cfg.batch_size,) + x.shape[2:])

        generated = replay.Generated(
            prompt=prompts, response=by_group(samples.response), mask=by_group(samples.mask),
            log_prob=by_group(samples.log_prob), entropy=by_group(samples.entropy),
            version=by_group(versions), reward=by_group(reward))
        store, own_slots = replay.written_into(state.replay, generated)
        slots, members, _ = replay.replayed_groups(store, own_slots, key, hp.replay_online_prob)
        drawn = replay.gathered(store, slots, members)
        return state.replace(replay=store), (
            jnp.repeat(drawn.prompt, cfg.group_size, axis=0),
            Samples(response=by_row(drawn.response), mask=by_row(drawn.mask),
                    log_prob=by_row(drawn.log_prob), entropy=by_row(drawn.entropy)),
            by_row(drawn.version), by_row(drawn.reward))

    def behaviour_versions(self, state: TokenState, key: jax.Array,
                           hp: TokenHParams) -> tuple[jax.Array, jax.Array]:
        """Each generator's behaviour version for each response token, `[generators, L]`, and
        `[generators]` 1.0 where its generation replaced one refused as stale (only for an
        algorithm that `refuses_stale`).

        Constant along a sequence, except under `in_flight`: a generator starts its drawn lag
        behind and catches up with the learner while it decodes (`in_flight_lags`).
        """
        cfg = self.config
        lags = cfg.lag_model.draw(key, hp.lag, state.buffer, state.per_actor_lags,
                                  cfg.lag_warmup, cfg.response_length)
        if cfg.lag_model.changes_mid_rollout:
            token_lags = lags.T
        else:
            token_lags = jnp.broadcast_to(lags[:, None], (cfg.generators, cfg.response_length))
        refused = jnp.zeros(cfg.generators, jnp.float32)
        if self.algorithm.refuses_stale:
            token_lags, refused = refuse_stale(token_lags, hp.freshness_alpha)
        return state.buffer.latest_version - token_lags, refused

    def _sample(self, buffer: PolicyBuffer, versions: jax.Array, prompt: jax.Array,
                key: jax.Array, hp: TokenHParams) -> Samples:
        """Responses `[N, L]`, token `t` of generator `g`'s rows drawn by `versions[g, t]`."""
        cfg = self.config
        chex.assert_shape(versions, (cfg.generators, cfg.response_length))
        policies = to_bfloat16(buffer.policies) if cfg.bf16_behaviour else buffer.policies
        slots = versions % cfg.buffer_capacity
        per_generator = cfg.batch_size // cfg.generators

        def by_generator(sample, per_generator_args):
            """`sample(*args, prompt, key)` over each generator's own rows, args and key."""
            samples = jax.vmap(sample)(*per_generator_args,
                                       prompt.reshape(cfg.generators, per_generator, -1),
                                       jax.random.split(key, cfg.generators))
            return jax.tree.map(lambda x: x.reshape((cfg.batch_size,) + x.shape[2:]), samples)

        def per_sequence(_):  # one version per generator: its rows decode with one model
            params = jax.tree.map(lambda stack: stack[slots[:, 0]], policies)
            return by_generator(lambda params, p, k: self.policy.sample(
                params, p, k, cfg.response_length, hp.temperature), (params,))

        if not cfg.lag_model.changes_mid_rollout:
            return per_sequence(None)

        def per_token(_):
            if cfg.in_flight_cache == "shared":
                return by_generator(lambda slots, p, k: self.policy.sample_shared_cache(
                    policies, slots, p, k, cfg.response_length, hp.temperature), (slots,))
            return self.policy.sample_per_token(policies, jnp.repeat(slots, per_generator, axis=0),
                                                prompt, key, cfg.response_length, hp.temperature)

        # Decoding with every snapshot costs `K` times one model, so either decoding runs only
        # when some sequence changes version mid-decoding (never at lag 0 nor before the first
        # pushes), and lag 0 stays bit for bit the computation of `fixed:0`.
        unchanged = jnp.all(versions == versions[:, :1])
        return cond_in_every_run(unchanged, per_sequence, per_token, None)

    def _batch(self, state: TokenState, hp: TokenHParams, prompt, samples: Samples, versions,
               reward) -> Batch:
        cfg = self.config
        phase_log_prob, _ = self.policy.response_log_probs(state.params, prompt,
                                                           samples.response, hp.temperature)
        log_staleness = sequence_log_staleness(phase_log_prob, samples.log_prob, samples.mask)

        def grad_sq_norms():  # at pi_T, traced only for an algorithm that asks for them
            return sequence_grad_sq_norms(self.policy, state.params, prompt, samples.response,
                                          hp.temperature).reshape(cfg.prompts, cfg.group_size)

        advantages = self.algorithm.advantages(AdvantageInputs(
            reward=reward.reshape(cfg.prompts, cfg.group_size),
            log_staleness=log_staleness.reshape(cfg.prompts, cfg.group_size),
            scale_by_std=cfg.scale_advantages_by_std,
            sequence_grad_sq_norms=grad_sq_norms)).reshape(-1)
        reference_log_prob = None
        if self.algorithm.needs_reference:
            reference_log_prob, _ = self.policy.response_log_probs(
                state.reference, prompt, samples.response, hp.temperature)
        return Batch(prompt=prompt, response=samples.response, mask=samples.mask,
                     behaviour_log_prob=samples.log_prob, phase_log_prob=phase_log_prob,
                     advantages=advantages, reward=reward, entropy=samples.entropy,
                     behaviour_version=versions,
                     version_gap=(state.buffer.latest_version - versions).astype(jnp.float32),
                     group=jnp.repeat(jnp.arange(cfg.prompts, dtype=jnp.int32), cfg.group_size),
                     reference_log_prob=reference_log_prob, refused=jnp.zeros_like(reward))

    # ------------------------------------------------------------------------ optimisation
    def adam(self, hp: TokenHParams) -> optax.GradientTransformation:
        """Adam, or AdamW with decoupled `weight_decay` (VCPO's optimiser) under
        `optimizer="adamw"`."""
        if self.config.optimizer == "adamw":
            return optax.adamw(self.learning_rate(hp), eps=self.adam_eps,
                               weight_decay=hp.weight_decay)
        return super().adam(hp)

    def terms(self, params, mb: Batch, hp: TokenHParams) -> TokenTerms:
        """The surrogate's inputs for minibatch `mb` under `params`."""
        cfg = self.config
        log_prob, _ = self.policy.response_log_probs(params, mb.prompt, mb.response,
                                                     hp.temperature)
        return TokenTerms(log_prob=log_prob, behaviour_log_prob=mb.behaviour_log_prob,
                          phase_log_prob=mb.phase_log_prob, advantages=mb.advantages,
                          mask=mb.mask, version_gap=mb.version_gap, group=mb.group,
                          reward=mb.reward, reference_log_prob=mb.reference_log_prob,
                          num_groups=cfg.prompts,
                          aggregation=self.algorithm.aggregation or cfg.aggregation,
                          is_level=cfg.is_level, rollout_is=cfg.rollout_is,
                          tv_reference=cfg.tv_reference,
                          tv_scope=cfg.tv_scope, tv_delta_convention=cfg.tv_delta_convention)

    def _loss(self, params, mb: Batch, hp: TokenHParams):
        t = self.terms(params, mb, hp)
        loss, stabiliser = self.algorithm.policy_loss(t, hp)
        behaviour_ratio = jax.lax.stop_gradient(t.behaviour_log_ratio)
        phase_ratio = jax.lax.stop_gradient(t.phase_log_ratio)
        metrics = {name: stabiliser.get(name, jnp.nan) for name in STABILISER_METRICS}
        return loss, {**jax.lax.stop_gradient(metrics), "policy_loss": loss,
                      phase.KEPT: stabiliser.get(phase.KEPT),
                      "tv_forward": losses.tv_estimate(phase_ratio, mb.mask),
                      "approx_kl": _kl(phase_ratio, mb.mask),
                      "behaviour_kl": _kl(behaviour_ratio, mb.mask)}

    def _minibatches(self, batch: Batch, key: jax.Array) -> Batch:
        m = self.config.minibatches
        order = jax.random.permutation(key, self.config.batch_size)
        return jax.tree.map(lambda x: x[order].reshape((m, -1) + x.shape[1:]), batch)

    def optimise(self, state: TokenState, batch: Batch, key: jax.Array, hp: TokenHParams):
        tx = self.optimizer(hp)
        if self.algorithm.hparam_schedule is not None:
            # The optimiser's own hyper-parameters are read above, off any schedule.
            hp = self.algorithm.hparam_schedule(hp, state.update)
        grad_fn = jax.value_and_grad(self._loss, has_aux=True)

        def minibatch_step(carry, mb):
            params, opt_state = carry
            (_, metrics), grads = grad_fn(params, mb, hp)
            extra = {}
            if self.algorithm.ess_scaling:
                ess = losses.ess_ratio(sequence_log_staleness(
                    mb.phase_log_prob, mb.behaviour_log_prob, mb.mask))
                extra = {"ess": ess, "ess_target": hp.ess_target}
                metrics["ess_lr_scale"] = losses.ess_step_scale(ess, hp.ess_target)
            else:
                metrics["ess_lr_scale"] = jnp.nan
            params, opt_state, updates, metrics[phase.SKIPPED_STEP] = phase.optimiser_step(
                tx, grads, opt_state, params, metrics.pop(phase.KEPT), **extra)
            grad_norm = optax.global_norm(grads)
            metrics["grad_norm"] = grad_norm
            # The step length per unit of gradient (Adam's and clipping's combined scaling);
            # undefined, so NaN, for a zero gradient (every group's rewards equal).
            metrics["effective_learning_rate"] = jnp.where(
                grad_norm > 0, optax.global_norm(updates) / jnp.maximum(grad_norm, 1e-30),
                jnp.nan)
            return (params, opt_state), metrics

        (params, opt_state), metrics = phase.scan_epochs(
            minibatch_step, (state.params, state.opt_state),
            lambda epoch_key: self._minibatches(batch, epoch_key), key, self.config.epochs)
        return params, opt_state, {**jax.tree.map(jnp.nanmean, metrics),
                                   **phase.acted_shares(metrics)}

    def update(self, state: TokenState, hp: TokenHParams) -> tuple[TokenState, Metrics]:
        """One generation and one optimisation phase; a non-finite result freezes the run."""
        key, generate_key, optimise_key = jax.random.split(state.key, 3)
        collected, batch = self.collect(state, generate_key, hp)
        params, opt_state, metrics = self.optimise(state, batch, optimise_key, hp)
        if self.algorithm.refuses_stale:  # refused before the phase: at all its steps or none
            metrics[STALE_REFUSED] = batch.refused.mean()
            metrics[phase.acted_name(STALE_REFUSED)] = batch.refused.max()
        new_state = collected.replace(params=params, opt_state=opt_state,
                                      buffer=push(state.buffer, params), key=key,
                                      update=state.update + 1)
        staleness = batch.phase_log_prob - batch.behaviour_log_prob
        log_staleness = sequence_log_staleness(batch.phase_log_prob, batch.behaviour_log_prob,
                                               batch.mask)
        log_ratio_median, log_ratio_p99 = jnp.quantile(log_staleness, jnp.array([0.5, 0.99]))
        gap = batch.version_gap
        metrics.update(
            reward_mean=batch.reward.mean(),
            response_length=batch.mask.sum(axis=1).mean(),
            entropy=losses.aggregate(batch.entropy, batch.mask),
            version_gap_mean=losses.aggregate(gap, batch.mask),
            version_gap_max=jnp.where(batch.mask > 0, gap, 0.0).max(),
            initial_policy_share=losses.aggregate(from_initial_policy(batch.behaviour_version),
                                                  batch.mask),
            tv_backward=losses.tv_estimate(staleness, batch.mask),
            ess_ratio=losses.ess_ratio(log_staleness),
            sequence_log_ratio_median=log_ratio_median,
            sequence_log_ratio_p99=log_ratio_p99,
        )
        return freeze_if_diverged(state, new_state, (params, opt_state, metrics["policy_loss"]),
                                  metrics)

    # ------------------------------------------------------------------------ evaluation
    def evaluated(self, state: TokenState) -> Params:
        return state.params

    def evaluate(self, policy: Params, key: jax.Array) -> jax.Array:
        """Greedy accuracy of the learner's parameters on the fixed held-out prompts (`key`
        unused)."""
        del key
        return greedy_accuracy(self.policy, policy, self.eval_prompts, self.eval_answers,
                               self.config.response_length, self.unchecked)


def make_train(config: TokenConfig, initial_params: Params):
    """`train(key, hparams) -> (state, metrics)` for `config` (validated now), starting from
    `initial_params`."""
    return TokenTrainer(config, initial_params).train
