"""The contract every testbed's trainer keeps, and the parts of it written once for all.

A testbed's trainer is built from a config (validated by its caller, before anything compiles)
and provides `init`, `collect`, `update`, `evaluated` and `evaluate`; this base gives it the
optimiser, the period loop `run` (each period's updates a `lax.scan`, ending with what its
evaluation reads), `train` (every period, then their evaluations) and the abstract shapes of a
run's state. The driver, sweeps and benchmarks call these methods only, vmapped over runs,
whatever the testbed.

`run` leaves the evaluations out: the driver evaluates each period with the program that
evaluates the initial state, so that the evaluation (for a physics task, its own copies of the
reset and the step, which XLA compiles once per place they appear) is compiled once, apart from
and beside the chunk program, instead of twice.

The contract is generic over the testbed's config, hyper-parameters, run state and the policy
its evaluation reads (`Trainer[Config, HParams, State, Policy]`), so the registry
(`vaco_jax.testbeds.Testbed`) and the driver's programs carry a testbed's own types. The state
of every testbed is a `flax.struct` dataclass with at least `key`, `update`, `diverged` and
`diverged_at` (`RunState`, `vaco_jax.core.divergence`).
"""

from __future__ import annotations

import abc
from typing import Any, Generic, Protocol, Self, TypeVar

import jax
import jax.numpy as jnp
import optax
from flax import struct

from vaco_jax import losses
from vaco_jax.core.config import Config, HParamsBase

Metrics = dict[str, jax.Array]


class RunState(Protocol):
    """What the shared loop reads of every testbed's run state."""

    key: jax.Array
    update: jax.Array  # int32, updates done
    diverged: jax.Array  # bool
    diverged_at: jax.Array  # int32, 1-based number of the first non-finite update, -1 if none

    def replace(self, **changes: Any) -> Self: ...


class Algorithm(Protocol):
    """What the shared optimiser reads of a testbed's registry entry."""

    @property
    def ess_scaling(self) -> bool: ...


ConfigT = TypeVar("ConfigT", bound=Config)
HParamsT = TypeVar("HParamsT", bound=HParamsBase)
StateT = TypeVar("StateT", bound=RunState)
PolicyT = TypeVar("PolicyT")


@struct.dataclass
class Evaluation(Generic[PolicyT]):
    """What one evaluation of a run reads: the learner's policy, the evaluation's key, and
    whether the run had diverged (its score is then NaN)."""

    policy: PolicyT
    key: jax.Array
    diverged: jax.Array


class Trainer(abc.ABC, Generic[ConfigT, HParamsT, StateT, PolicyT]):
    """One testbed's compiled-program pieces for one config."""

    config: ConfigT  # `updates_per_period`, `num_periods`
    algorithm: Algorithm
    score: str  # the metric `run` fills with the evaluation, NaN between evaluations
    adam_eps: float = 1e-8  # optax's default
    # Whether an evaluation draws random numbers: its key is then split off the state's key.
    evaluation_draws: bool = True
    # The warm start `init` still needs (a token run's `SupervisedStart`), whose parameters the
    # driver resolves and passes to the constructor as `initial_params`; None if none.
    # Only `vaco_jax.run.warm_start` reads it, so the core names no testbed's warm start.
    pending_warm_start: object | None = None

    @abc.abstractmethod
    def init(self, key: jax.Array, hp: HParamsT) -> StateT:
        """The state of one run before its first update."""

    @abc.abstractmethod
    def collect(self, state: StateT, key: jax.Array, hp: HParamsT) -> tuple[StateT, object]:
        """`(state, data)`: one update's data, gathered by behaviour policies drawn from the
        policy buffer, and the state with its actors advanced (the learner untouched). The data
        is the testbed's own (only its `update` reads it), so each trainer narrows its type."""

    @abc.abstractmethod
    def update(self, state: StateT, hp: HParamsT) -> tuple[StateT, Metrics]:
        """One `collect` and one optimisation phase; per-update scalar metrics."""

    @abc.abstractmethod
    def evaluated(self, state: StateT) -> PolicyT:
        """What `evaluate` reads of a state: the learner's policy."""

    @abc.abstractmethod
    def evaluate(self, policy: PolicyT, key: jax.Array) -> jax.Array:
        """The score (a scalar) of the learner's `policy`, `evaluated(state)`."""

    def evaluation_score(self, evaluation: Evaluation[PolicyT]) -> jax.Array:
        """`evaluate`'s score of one `Evaluation`, NaN once its run has diverged."""
        return jnp.where(evaluation.diverged, jnp.nan,
                         self.evaluate(evaluation.policy, evaluation.key))

    def evaluation_of(self, state: StateT, key: jax.Array) -> Evaluation[PolicyT]:
        return Evaluation(policy=self.evaluated(state), key=key, diverged=state.diverged)

    def gradient_clip(self, hp: HParamsT) -> optax.GradientTransformation:
        return optax.clip_by_global_norm(hp.max_grad_norm)

    def learning_rate(self, hp: HParamsT) -> optax.ScalarOrSchedule:
        return hp.learning_rate

    def adam(self, hp: HParamsT) -> optax.GradientTransformation:
        """The adaptive step the optimiser takes after clipping: Adam."""
        return optax.adam(self.learning_rate(hp), eps=self.adam_eps)

    def optimizer(self, hp: HParamsT) -> optax.GradientTransformationExtraArgs:
        """Clipping, Adam (`adam`), and for ESS-scaling algorithms VCPO's step factor after Adam
        (`losses.scale_by_ess`, fed `ess=` and `ess_target=` at each update)."""
        transforms = [self.gradient_clip(hp), self.adam(hp)]
        if self.algorithm.ess_scaling:
            transforms.append(losses.scale_by_ess())
        return optax.chain(*transforms)

    def state_shapes(self, key: jax.Array, hp: HParamsT) -> StateT:
        """The abstract shapes of `init`'s state, computing nothing (for memory estimates)."""
        return jax.eval_shape(self.init, key, hp)

    def run(self, state: StateT, hp: HParamsT,
            num_periods: int) -> tuple[StateT, Metrics, Evaluation[PolicyT]]:
        """`num_periods` x `updates_per_period` updates: the state, per-update scalar metrics
        `[num_periods * updates_per_period]` and each period's `Evaluation` (leaves
        `[num_periods, ...]`, one copy of the policy per period), the evaluation of the state
        it ended with, to score apart (`evaluation_score`)."""
        per_period = self.config.updates_per_period

        def period(state, _):
            state, metrics = jax.lax.scan(lambda s, _: self.update(s, hp), state, None,
                                          length=per_period)
            if self.evaluation_draws:
                key, eval_key = jax.random.split(state.key)
                state = state.replace(key=key)
            else:
                eval_key = state.key
            return state, (metrics, self.evaluation_of(state, eval_key))

        state, (metrics, evaluations) = jax.lax.scan(period, state, None, length=num_periods)
        return state, jax.tree.map(lambda m: m.reshape((-1,) + m.shape[2:]), metrics), evaluations

    def with_scores(self, metrics: Metrics, evaluations: Evaluation[PolicyT]) -> Metrics:
        """`metrics` with the score metric: each period's `evaluation_score` at its last update,
        NaN at the others."""
        scores = jax.lax.map(self.evaluation_score, evaluations)
        per_period = self.config.updates_per_period
        filled = jnp.full((scores.shape[0], per_period), jnp.nan).at[:, -1].set(scores)
        return {**metrics, self.score: filled.reshape(-1)}

    def train(self, key: jax.Array, hp: HParamsT) -> tuple[StateT, Metrics]:
        """The whole run: `init`, every period, then the periods' evaluations."""
        state, metrics, evaluations = self.run(self.init(key, hp), hp, self.config.num_periods)
        return state, self.with_scores(metrics, evaluations)
