"""Supervised warm start on demonstrations, some of them deliberately wrong.

RL on language models starts from a pretrained policy of intermediate accuracy; here that policy
is trained by teacher forcing on demonstrations, some of them wrong (`WarmStart.corruption`):

- `calibrated` (the default): a prompt is in the corrupted class when its first operand digit
  (the token after BOS) is below `10 x corrupted_share`; on that class the demonstration's last
  answer digit is shifted by +1 (`Task.wrong_answer`; a worked solution's step that gives that
  digit with it) with probability `wrong_probability` (> 1/2), elsewhere it is always right.
  Trained to convergence (a cosine-decayed learning rate to 0), greedy decoding reproduces the
  majority answer: wrong on the class, right elsewhere. Its held-out accuracy is then set by
  the data, `target_accuracy` (the share of held-out prompts outside the class), whatever the
  CPU's rounding or the seed, while sampling still gives the right answer on the class (with
  probability about `1 - wrong_probability` at temperature 1; 0.16 to 0.18 at 0.7 with the
  defaults, measured), so RL can raise accuracy by up to the class's share.
  `wrong_probability` may also grade the class: one probability per first digit of the class
  (digit 0 first), so that its sub-classes start from different chances of sampling the right
  answer and RL finds them at different times, not in one step.
- `random_digit` (the warm start of results committed before 2026-11-25, reproduced bit for bit
  by `LEGACY`): a `corrupt_fraction` of the answers has one random digit changed. The mode of
  these demonstrations is the right answer, so training to convergence would reach accuracy
  near 1; `LEGACY` stops after 250 constant-rate steps, in the middle of the climb, where the
  accuracy depends on the CPU's numerics and the seed (0.02 to 0.66).

A run's warm start (`SupervisedStart`) is resolved before the run starts, read from its cache or
trained with `supervised_train` (`vaco_jax.run.warm_start`), and given to its trainer as its
initial parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax

from vaco_jax.tokens import compat, tasks
from vaco_jax.tokens.model import ModelSpec, TokenPolicy


CORRUPTIONS = ("calibrated", "random_digit")
SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """The supervised warm start's settings (the module docstring explains `corruption`)."""

    corruption: str = "calibrated"
    steps: int = 2000
    batch: int = 64
    learning_rate: float = 3e-3
    schedule: str = "cosine"  # of the learning rate: cosine decay to 0 over `steps`, or constant
    corrupted_share: float = 0.5  # calibrated: a multiple of 0.1 (first digit below 10 x share)
    # calibrated: P(wrong demonstration) on the corrupted class, or one per digit of the class
    wrong_probability: float | tuple[float, ...] = 0.75
    corrupt_fraction: float = 0.3  # random_digit: share of answers with a random digit changed
    seed: int = 0

    def __post_init__(self) -> None:
        if self.corruption not in CORRUPTIONS:
            raise ValueError(f"warm_start corruption={self.corruption!r} is not supported; "
                             f"expected one of {CORRUPTIONS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"warm_start schedule={self.schedule!r} is not supported; "
                             f"expected one of {SCHEDULES}")
        if self.steps < 1 or self.batch < 1:
            raise ValueError(f"warm_start steps={self.steps} and batch={self.batch} must be "
                             f"at least 1")
        digits = self.corrupted_share * 10
        if not (0 <= digits <= 10 and abs(digits - round(digits)) < 1e-9):
            raise ValueError(f"warm_start corrupted_share={self.corrupted_share} must be a "
                             f"multiple of 0.1 in [0, 1]: the class is a set of first digits")
        if isinstance(self.wrong_probability, (list, tuple)):  # graded: a table's list
            graded = tuple(self.wrong_probability)
            object.__setattr__(self, "wrong_probability", graded)
            if len(graded) != round(digits):
                raise ValueError(f"warm_start wrong_probability={list(graded)} grades the "
                                 f"class: give one probability per digit of it, "
                                 f"{round(digits)} (corrupted_share={self.corrupted_share})")
        probabilities = (self.wrong_probability if isinstance(self.wrong_probability, tuple)
                         else (self.wrong_probability,))
        for probability in probabilities:
            if isinstance(probability, bool) or not isinstance(probability, (int, float)) \
                    or not 0.5 < probability <= 1:
                raise ValueError(f"warm_start wrong_probability={probability} must lie in "
                                 f"(0.5, 1]: the wrong answer must be the class's majority")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> WarmStart:
        """The settings a saved record or an experiment file's table describes. A record of
        exactly the fields every `config.json` held before `corruption` existed is that warm
        start, `LEGACY`'s with those values (`compat.is_pre_calibration`); any other table is
        read over the defaults."""
        if compat.is_pre_calibration(values):
            return dataclasses.replace(LEGACY, **values)
        return cls(**values)


# The warm start of every result committed before 2026-11-25.
LEGACY = WarmStart(corruption="random_digit", steps=250, schedule="constant")
PRESETS = {"calibrated": WarmStart(), "legacy": LEGACY}


def in_corrupted_class(prompt: jax.Array, share: float) -> jax.Array:
    """Whether each prompt `[B, P]` is in the calibrated corruption's class: its first operand
    digit (every task's token after BOS) is below `10 x share`."""
    return prompt[:, 1] < round(10 * share)


def target_accuracy(settings: WarmStart, prompts: jax.Array) -> float:
    """The greedy accuracy a converged calibrated warm start has on `prompts`: the share of
    them outside the corrupted class."""
    if settings.corruption != "calibrated":
        raise ValueError(f"a {settings.corruption!r} warm start has no target accuracy")
    return 1.0 - float(in_corrupted_class(prompts, settings.corrupted_share).mean())


def corrupt_calibrated(key: jax.Array, task: tasks.Task, prompt: jax.Array,
                       answer: jax.Array, settings: WarmStart) -> jax.Array:
    """`answer` `[B, A]` replaced by the task's wrong answer (`Task.wrong_answer`: its last
    digit shifted by +1 mod 10, and a worked solution's step that gives it) with probability
    `wrong_probability` (graded: that of the prompt's first digit) where the prompt is in the
    corrupted class. One fixed wrong answer per prompt, so the class's demonstrations have a
    majority the model can learn."""
    probability = settings.wrong_probability
    if isinstance(probability, tuple):
        graded = jnp.asarray(probability, jnp.float32)
        probability = graded[jnp.clip(prompt[:, 1], 0, len(probability) - 1)]
    wrong = (in_corrupted_class(prompt, settings.corrupted_share)
             & (jax.random.uniform(key, prompt.shape[:1]) < probability))
    return jnp.where(wrong[:, None], task.wrong_answer(answer), answer)


def corrupt(key: jax.Array, answer: jax.Array, fraction: float) -> jax.Array:
    """`answer` `[B, A]` with one digit (never the EOS) changed in a `fraction` of the rows."""
    pick_key, position_key, shift_key = jax.random.split(key, 3)
    batch, length = answer.shape
    rows = jnp.arange(batch)
    position = jax.random.randint(position_key, (batch,), 0, length - 1)
    shift = jax.random.randint(shift_key, (batch,), 1, 10)
    changed = answer.at[rows, position].set((answer[rows, position] + shift) % 10)
    return jnp.where(jax.random.uniform(pick_key, (batch, 1)) < fraction, changed, answer)


def supervised_train(task: tasks.Task, spec: ModelSpec, settings: WarmStart):
    """Parameters after `settings.steps` Adam steps of teacher forcing (one `lax.scan`)."""
    policy = TokenPolicy(spec)
    init_key, data_key = jax.random.split(jax.random.PRNGKey(settings.seed))
    params = policy.init(init_key)
    optimizer = optax.adam(
        optax.cosine_decay_schedule(settings.learning_rate, settings.steps)
        if settings.schedule == "cosine" else settings.learning_rate)
    one = jnp.asarray(1.0)

    def loss(params, prompt, answer):
        return -policy.response_log_probs(params, prompt, answer, one)[0].sum(axis=1).mean()

    def step(carry, key):
        params, opt_state = carry
        sample_key, corrupt_key = jax.random.split(key)
        prompt, answer = tasks.sample(task, sample_key, settings.batch)
        answer = (corrupt_calibrated(corrupt_key, task, prompt, answer, settings)
                  if settings.corruption == "calibrated"
                  else corrupt(corrupt_key, answer, settings.corrupt_fraction))
        value, grads = jax.value_and_grad(loss)(params, prompt, answer)
        updates, opt_state = optimizer.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), value

    (params, _), losses = jax.jit(lambda p: jax.lax.scan(
        step, (p, optimizer.init(p)), jax.random.split(data_key, settings.steps)))(params)
    return params, losses


@dataclasses.dataclass(frozen=True)
class SupervisedStart:
    """One run's warm start: the task and model it trains, its settings, and the folder its
    parameters are cached in (None: not cached)."""

    task: tasks.Task
    spec: ModelSpec
    settings: WarmStart
    cache_dir: str | os.PathLike | None = None

    @property
    def steps(self) -> int:
        return self.settings.steps

    @property
    def label(self) -> str:
        """What it trains on, as its log lines name it."""
        return self.task.name

    def cache_name(self) -> str:
        """Its cache folder's name: the task and a hash of every setting that shapes it."""
        return f"{self.task.name}-{settings_hash(self.task, self.spec, self.settings)}"

    def shapes(self):
        """Its parameters' shapes and dtypes, for restoring them."""
        return jax.eval_shape(TokenPolicy(self.spec).init, jax.random.PRNGKey(0))

    def train(self):
        """Its parameters, trained now (`supervised_train`)."""
        return supervised_train(self.task, self.spec, self.settings)[0]


def settings_hash(task: tasks.Task, spec: ModelSpec, settings: WarmStart) -> str:
    # The task as its name and size, as every cache folder written so far describes it.
    described = {"task": {"name": task.name, "size": task.size},
                 "model": dataclasses.asdict(spec), "warm_start": dataclasses.asdict(settings)}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
