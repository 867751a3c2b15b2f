"""Time-major estimators: GAE and V-trace (conventions in `vaco_jax.estimators`)."""

import chex
import jax
import jax.numpy as jnp

from vaco_jax.estimators.checks import check_time_major, scalar

Array = chex.Array
Numeric = chex.Numeric


def _reverse_linear_recursion(xs: Array, decays: Array) -> Array:
    """Solves `y_t = xs_t + decays_t * y_{t+1}` backwards, with `y_T = 0`."""

    def step(y_next, inputs):
        x, decay = inputs
        y = x + decay * y_next
        return y, y

    _, ys = jax.lax.scan(
        step, jnp.zeros(xs.shape[1:], xs.dtype), (xs, decays), reverse=True
    )
    return ys


def gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    discounts: Array,
    continuations: Array,
    lambda_: Numeric,
) -> tuple[Array, Array]:
    """Generalised advantage estimation (Schulman et al., 2016).

    `delta_t = rewards_t + discounts_t * next_values_t - values_t` and
    `A_t = delta_t + discounts_t * lambda_ * continuations_t * A_{t+1}`, with
    `A = 0` beyond the last step (which bootstraps from `next_values`).

    Args:
        rewards: `[T, ...]` rewards r_t.
        values: `[T, ...]` V(s_t).
        next_values: `[T, ...]` value of the true next observation of step t.
        discounts: `[T, ...]` gamma * (1 - terminated_t).
        continuations: `[T, ...]` 0 where step t ended its episode, else 1.
        lambda_: scalar GAE lambda.

    Returns:
        `(advantages, value_targets)`, both `[T, ...]` and stop-gradient, with
        `value_targets = advantages + values`.
    """
    dtype = check_time_major(
        rewards=rewards,
        values=values,
        next_values=next_values,
        discounts=discounts,
        continuations=continuations,
    )
    lambda_ = scalar("lambda_", lambda_, dtype)
    rewards, values, next_values, discounts, continuations = (
        jnp.asarray(x, dtype)
        for x in (rewards, values, next_values, discounts, continuations)
    )

    deltas = rewards + discounts * next_values - values
    advantages = _reverse_linear_recursion(
        deltas, discounts * lambda_ * continuations
    )
    return (
        jax.lax.stop_gradient(advantages),
        jax.lax.stop_gradient(advantages + values),
    )


def _truncated_ratio(log_rhos: Array, bar: Array) -> Array:
    # Truncating in log space keeps any finite log-ratio (even 1e4) finite.
    return jnp.exp(jnp.minimum(log_rhos, jnp.log(bar)))


def vtrace(
    rewards: Array,
    values: Array,
    next_values: Array,
    discounts: Array,
    continuations: Array,
    log_rhos: Array,
    lambda_: Numeric = 1.0,
    rho_bar: Numeric = 1.0,
    c_bar: Numeric = 1.0,
    rho_bar_pg: Numeric = 1.0,
) -> tuple[Array, Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018).

    With `w_t = exp(log_rhos_t)`, `rho_t = min(rho_bar, w_t)`,
    `c_t = lambda_ * min(c_bar, w_t)` and
    `delta_t = rewards_t + discounts_t * next_values_t - values_t`:

        vs_t - V_t = rho_t * delta_t
            + discounts_t * c_t * continuations_t * (vs_{t+1} - V_{t+1}),

    with the correction `vs - V` equal to 0 beyond the last step. The
    policy-gradient advantage is
    `min(rho_bar_pg, w_t) * (rewards_t + discounts_t * q_t - values_t)` with
    `q_t = next_values_t + continuations_t * (vs_{t+1} - V_{t+1})`: inside an
    episode (where `values[t+1] == next_values[t]`) that is `vs_{t+1}`, and at
    an episode boundary or the last step it is the bootstrap `next_values_t`.
    Writing `q_t` through the correction keeps on-policy V-trace with
    `lambda_ = 1` equal to GAE even where `values[t+1]` and `next_values[t]`
    disagree.

    With all `log_rhos = 0`, `value_targets` equal those of `gae` with the same
    `lambda_`, and with `lambda_ = 1` so do the advantages.

    Args:
        rewards: `[T, ...]` rewards r_t.
        values: `[T, ...]` V(s_t).
        next_values: `[T, ...]` value of the true next observation of step t.
        discounts: `[T, ...]` gamma * (1 - terminated_t).
        continuations: `[T, ...]` 0 where step t ended its episode, else 1.
        log_rhos: `[T, ...]` log(pi(a_t|s_t) / beta(a_t|s_t)), target over
            behaviour policy.
        lambda_: scalar trace-cutting lambda.
        rho_bar: scalar truncation of the importance weight in `delta_t`.
        c_bar: scalar truncation of the trace coefficients.
        rho_bar_pg: scalar truncation of the policy-gradient importance weight.

    Returns:
        `(pg_advantages, value_targets)`, both `[T, ...]` and stop-gradient;
        `value_targets` are the V-trace targets `vs`.
    """
    dtype = check_time_major(
        rewards=rewards,
        values=values,
        next_values=next_values,
        discounts=discounts,
        continuations=continuations,
        log_rhos=log_rhos,
    )
    lambda_ = scalar("lambda_", lambda_, dtype)
    rho_bar = scalar("rho_bar", rho_bar, dtype)
    c_bar = scalar("c_bar", c_bar, dtype)
    rho_bar_pg = scalar("rho_bar_pg", rho_bar_pg, dtype)
    rewards, values, next_values, discounts, continuations, log_rhos = (
        jnp.asarray(x, dtype)
        for x in (
            rewards, values, next_values, discounts, continuations, log_rhos
        )
    )

    rhos = _truncated_ratio(log_rhos, rho_bar)
    cs = lambda_ * _truncated_ratio(log_rhos, c_bar)
    deltas = rewards + discounts * next_values - values
    corrections = _reverse_linear_recursion(
        rhos * deltas, discounts * cs * continuations
    )
    vs = values + corrections

    next_corrections = jnp.concatenate(
        [corrections[1:], jnp.zeros_like(corrections[:1])], axis=0
    )
    q_next = next_values + continuations * next_corrections
    pg_advantages = _truncated_ratio(log_rhos, rho_bar_pg) * (
        rewards + discounts * q_next - values
    )
    return jax.lax.stop_gradient(pg_advantages), jax.lax.stop_gradient(vs)
