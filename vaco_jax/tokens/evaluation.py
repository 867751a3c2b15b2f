"""Greedy accuracy on a fixed set of held-out prompts."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vaco_jax.tokens import tasks
from vaco_jax.tokens.model import TokenPolicy

EVAL_SEED = 2**31 - 1  # the evaluation prompts' own key stream, apart from every run's key


def held_out_set(task: tasks.Task, size: int) -> tuple[jax.Array, jax.Array]:
    """The same `size` evaluation-split prompts and answers for every run and seed."""
    return tasks.sample(task, jax.random.PRNGKey(EVAL_SEED), size, held_out=True)


def greedy_accuracy(policy: TokenPolicy, params, prompts: jax.Array, answers: jax.Array,
                    response_length: int, unchecked: int = 0) -> jax.Array:
    """Fraction of `prompts` whose greedy response is exactly the answer, its first `unchecked`
    positions (worked steps, `tasks.reward`) only required to be digits."""
    samples = policy.sample(params, prompts, jax.random.PRNGKey(0), response_length,
                            jnp.asarray(1.0), greedy=True)
    return tasks.reward(answers, samples.response, unchecked=unchecked).mean()
