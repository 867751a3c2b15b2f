"""The lag models: how far behind the learner each environment acts, one class per model.

A config holds one lag model object (`fixed`, `uniform`, `geometric`, `per_actor`, `bounded`,
`in_flight`, `empirical`), built once where the config is made: by `named` from a config
record, a `[lag]` table or `MODEL:PARAM` (`from_parameter`). Its level, the lag
hyper-parameter, stays a float leaf of the hyper-parameters, vmapped over runs, and is handed
to the methods; the object itself is static. A config record keeps the model as its name
(`lag_model`) and its histogram (`lag_probabilities`, `empirical` only): `record`.

At the start of every rollout each environment draws its lag, in versions behind the newest
(`LagModel.draw`). Until `K` versions exist a lag can point before the first version; the
config's `lag_warmup` either clips it onto the oldest version or draws it again among the
versions that exist (`LAG_WARMUPS`).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core.knobs import Knob
from vaco_jax.core.policy_buffer import (PolicyBuffer, effective_lags, max_available_lag,
                                         redraw_unavailable_lags)

LAG_WARMUPS = ("clip", "redraw")  # see LagModel.draw
RECORD_NAMES = ("lag_model", "lag_probabilities")
"""The entries of a lag model in a config record (`LagModel.record`, `named`)."""


@dataclasses.dataclass(frozen=True)
class LagModel(abc.ABC):
    """One lag model: its draws, its validation and its words. `lag` is the level, the lag
    hyper-parameter of one run (a traced `[]` float under `jit`)."""

    name: ClassVar[str]
    # Whether an environment's behaviour policy changes within a rollout (`draw` then gives
    # one lag per step).
    changes_mid_rollout: ClassVar[bool] = False
    # Whether the model reads `lag_probabilities` (a histogram) instead of a level.
    takes_probabilities: ClassVar[bool] = False

    @classmethod
    def from_probabilities(cls, probabilities: Any = ()) -> LagModel:
        """The model of a config record whose `lag_probabilities` are `probabilities`."""
        if probabilities:
            raise ValueError(f"lag_probabilities is only used with lag_model='empirical', got "
                             f"lag_model={cls.name!r} and lag_probabilities={probabilities!r}")
        return cls()

    @classmethod
    def from_parameter(cls, text: str) -> tuple[LagModel, float]:
        """The model and level of the `PARAM` of `MODEL:PARAM`; `ValueError` unless a number."""
        return cls(), float(text)

    def record(self) -> dict[str, Any]:
        """The model in a config record: its name and `lag_probabilities`."""
        return {"lag_model": self.name, "lag_probabilities": ()}

    @abc.abstractmethod
    def sample(self, key: jax.Array, lag: jax.Array, num_envs: int, capacity: int,
               per_actor_lags: jax.Array) -> jax.Array:
        """Each environment's lag (int32 `[E]`) for one rollout, over the whole buffer of
        `capacity` versions, whether they exist yet or not."""

    @abc.abstractmethod
    def redraw_unavailable(self, key: jax.Array, lags: jax.Array, lag: jax.Array,
                           buffer: PolicyBuffer) -> jax.Array:
        """`lags` with those of versions not pushed yet redrawn among the existing versions,
        from the model restricted to them and renormalised (`lag_warmup="redraw"`)."""

    def draw(self, key: jax.Array, lag: jax.Array, buffer: PolicyBuffer,
             per_actor_lags: jax.Array, warmup: str, length: int) -> jax.Array:
        """Each environment's lag for one rollout of `length` steps, always a version that
        exists: int32 `[E]`, or `[length, E]` when `changes_mid_rollout`. `per_actor_lags`
        is `initial_per_actor_lags`'s, one per environment.

        `sample` draws from the model over the whole buffer; lags of versions not pushed yet
        (only while fewer than `capacity` exist) are then, by `warmup`:
        - `clip`: the oldest existing version, which receives all their probability;
        - `redraw`: drawn from the model restricted to the existing versions and renormalised
          (`redraw_unavailable`). `uniform` is then uniform over `0..min(k, n-1)` with `n`
          versions, `geometric` truncated at `n`, `bounded` uniform over the `n` versions while
          `n <= eta`, `in_flight` redraws its start lag (its per-step lags only decrease from
          it), `empirical` renormalises the histogram over `0..n-1`, or clips if it has no mass
          there. `fixed` and `per_actor` are constant lags, point masses: as `clip`, an
          environment `d` versions behind acts with the oldest version until version `d`
          exists.
        Lags of existing versions are the same draws under both, so a full buffer or lag 0 gives
        identical lags.
        """
        if warmup not in LAG_WARMUPS:
            raise ValueError(f"warmup={warmup!r} is not supported; allowed values: "
                             f"{', '.join(LAG_WARMUPS)}")
        lags = self.sample(key, lag, per_actor_lags.shape[0], buffer.capacity, per_actor_lags)
        if warmup == "redraw":
            lags = self.redraw_unavailable(key, lags, lag, buffer)
        return effective_lags(buffer, lags)

    def initial_per_actor_lags(self, key: jax.Array, lag: jax.Array,
                               num_envs: int) -> jax.Array:
        """The per-environment lags the training state keeps (int32 `[E]`): drawn once by
        `per_actor`, zeros under the others."""
        del key, lag
        return jnp.zeros(num_envs, jnp.int32)

    def check(self, capacity: int) -> None:
        """Raises a `ValueError` unless the model's own settings suit a buffer of
        `capacity` versions."""

    def check_level(self, lag: Any, capacity: int) -> None:
        """Raises a `ValueError` unless the lag hyper-parameter (any shape) is an integer in
        `[0, capacity - 1]`, a lag the buffer holds."""
        lag = np.asarray(lag, np.float64)
        max_lag = capacity - 1
        if np.any((lag < 0) | (lag > max_lag) | (lag != np.round(lag))):
            raise ValueError(
                f"lag for lag_model={self.name!r} must be an integer in [0, {max_lag}] "
                f"(buffer_capacity - 1, buffer_capacity={capacity}), got {lag.tolist()}")

    def mean_lag(self, level: int, length: int, counted_steps: int | None = None) -> float:
        """The expected lag of a step of a rollout of `length` steps at lag `level`, with every
        lag available (a full buffer): the mean staleness at which lag models compare. The
        steps counted are all `length` of them, or the first `counted_steps`: the token
        trainer's `version_gap_mean` counts a response's valid tokens only (up to its EOS, not
        the padding after it), and under `in_flight` a response shorter than `length` misses
        the latest, freshest steps. Defined where a model writes `expected_lag`."""
        if not self.has_mean_lag():
            defined = [name for name, kind in LAG_MODELS.items() if kind.has_mean_lag()]
            raise ValueError(f"mean_lag is defined for the lag models {', '.join(defined)} (the "
                             f"others need the buffer or a histogram), got {self.name!r}")
        return self.expected_lag(level, length,
                                 _checked_counted_steps(level, length, counted_steps))

    @classmethod
    def has_mean_lag(cls) -> bool:
        return cls.expected_lag is not LagModel.expected_lag

    def expected_lag(self, level: int, length: int, counted_steps: int) -> float:
        """`mean_lag` of checked arguments, for the models that need neither the buffer nor a
        histogram."""
        raise NotImplementedError(f"{self.name} has no mean lag")

    def describe(self, level: float, capacity: int) -> str:
        """The model and level of a run and what they mean, e.g. `fixed 0 (synchronous)`."""
        return f"{self.name} {level:g} ({self.meaning(level, capacity)})"

    @abc.abstractmethod
    def meaning(self, level: float, capacity: int) -> str:
        """What the lags are at `level` with a buffer of `capacity` versions, in words."""


class ConstantLagModel(LagModel):
    """A lag constant per run or per environment, a point mass: restricted to the existing
    versions there is nothing to renormalise, so `redraw` acts as `clip`."""

    def redraw_unavailable(self, key: jax.Array, lags: jax.Array, lag: jax.Array,
                           buffer: PolicyBuffer) -> jax.Array:
        del key, lag, buffer
        return lags


class RandomLagModel(LagModel):
    """Lags drawn afresh every rollout from a distribution over the buffer, `log_probs`."""

    @abc.abstractmethod
    def log_probs(self, lag: jax.Array, capacity: int) -> jax.Array:
        """`log P(lag = j)` (up to a constant) for `j = 0, 1, ...`: `[capacity]`, or one entry
        per probability of a histogram."""

    def sample(self, key, lag, num_envs, capacity, per_actor_lags):
        """Draws from `log_probs`; `uniform` and `bounded` draw integers instead, the draws
        their runs have always made."""
        logits = self.log_probs(lag, capacity)
        return jax.random.categorical(key, logits, shape=(num_envs,)).astype(jnp.int32)

    def redraw_unavailable(self, key: jax.Array, lags: jax.Array, lag: jax.Array,
                           buffer: PolicyBuffer) -> jax.Array:
        return redraw_unavailable_lags(jax.random.fold_in(key, 1), lags,
                                       self.log_probs(lag, buffer.capacity),
                                       max_available_lag(buffer))


def _uniform_lags(key: jax.Array, lag: jax.Array, num_envs: int) -> jax.Array:
    """Lags uniform over `{0..lag}`, one per environment."""
    return jax.random.randint(key, (num_envs,), 0, jnp.round(lag).astype(jnp.int32) + 1)


def _checked_counted_steps(level: int, length: int, counted_steps: int | None) -> int:
    """The steps `mean_lag` counts, once its arguments are checked."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or level != int(level) \
            or level < 0:
        raise ValueError(f"level must be an integer >= 0, got {level!r}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an integer >= 1, got {length!r}")
    counted = length if counted_steps is None else counted_steps
    if isinstance(counted, bool) or not isinstance(counted, int) or not 1 <= counted <= length:
        raise ValueError(f"counted_steps must be an integer in [1, length={length}], "
                         f"got {counted_steps!r}")
    return counted


@dataclasses.dataclass(frozen=True)
class Fixed(ConstantLagModel):
    """Every environment lags `lag` versions; `fixed:0` is synchronous."""

    name: ClassVar[str] = "fixed"

    def sample(self, key, lag, num_envs, capacity, per_actor_lags):
        return jnp.full((num_envs,), jnp.round(lag), jnp.int32)

    def expected_lag(self, level: int, length: int, counted_steps: int) -> float:
        return float(level)

    def meaning(self, level: float, capacity: int) -> str:
        if level == 0:
            return "synchronous"
        return f"all acting {level:g} version{'' if level == 1 else 's'} behind the learner"


@dataclasses.dataclass(frozen=True)
class Uniform(RandomLagModel):
    """Lags uniform over `{0..lag}`, drawn every rollout."""

    name: ClassVar[str] = "uniform"

    def sample(self, key, lag, num_envs, capacity, per_actor_lags):
        return _uniform_lags(key, lag, num_envs)

    def log_probs(self, lag, capacity):
        return jnp.where(jnp.arange(capacity) <= jnp.round(lag), 0.0, -jnp.inf)

    def expected_lag(self, level: int, length: int, counted_steps: int) -> float:
        return level / 2

    def meaning(self, level: float, capacity: int) -> str:
        return f"lags uniform over 0..{level:g} versions, drawn every update"


@dataclasses.dataclass(frozen=True)
class Geometric(RandomLagModel):
    """`P(j) ∝ p (1-p)^j` for `j < K`, with `p = lag`."""

    name: ClassVar[str] = "geometric"

    def log_probs(self, lag, capacity):
        steps = jnp.arange(capacity)
        # The j == 0 term is written out so that p = 1 (log(0) = -inf) gives lag 0 exactly.
        return jnp.where(steps == 0, 0.0, steps * jnp.log1p(-lag))

    def check_level(self, lag: Any, capacity: int) -> None:
        lag = np.asarray(lag, np.float64)
        if np.any((lag <= 0) | (lag > 1)):
            raise ValueError(f"lag for lag_model='geometric' is the probability p and must lie in "
                             f"(0, 1], got {lag.tolist()}")

    def meaning(self, level: float, capacity: int) -> str:
        return f"P(lag j) proportional to {level:g} (1 - {level:g})^j, j up to {capacity - 1}"


@dataclasses.dataclass(frozen=True)
class PerActor(ConstantLagModel):
    """A constant lag per environment, drawn once at initialisation uniform over `{0..lag}`,
    like heterogeneous machines."""

    name: ClassVar[str] = "per_actor"

    def sample(self, key, lag, num_envs, capacity, per_actor_lags):
        return per_actor_lags

    def initial_per_actor_lags(self, key: jax.Array, lag: jax.Array,
                               num_envs: int) -> jax.Array:
        return _uniform_lags(key, lag, num_envs)

    def expected_lag(self, level: int, length: int, counted_steps: int) -> float:
        return level / 2  # uniform over {0..level}

    def meaning(self, level: float, capacity: int) -> str:
        return f"a constant lag per actor, drawn once from 0..{level:g} versions"


@dataclasses.dataclass(frozen=True)
class Bounded(RandomLagModel):
    """An asynchronous pipeline whose unconstrained lag is uniform over the whole buffer
    `{0..K-1}`, admitted only up to the staleness bound `eta = lag` (AReaL's
    `max_head_offpolicyness`): a generator that would fall further behind waits at the bound,
    so the lag is `min(U, eta)`, `P(j) = 1/K` for `j < eta` and `P(eta) = (K - eta)/K`."""

    name: ClassVar[str] = "bounded"

    def sample(self, key, lag, num_envs, capacity, per_actor_lags):
        unconstrained = jax.random.randint(key, (num_envs,), 0, capacity)
        return jnp.minimum(unconstrained, jnp.round(lag).astype(jnp.int32))

    def log_probs(self, lag, capacity):
        steps = jnp.arange(capacity)
        eta = jnp.round(lag)
        return jnp.where(steps < eta, 0.0,
                         jnp.where(steps == eta, jnp.log(capacity - eta), -jnp.inf))

    def meaning(self, level: float, capacity: int) -> str:
        return f"lags uniform over 0..{capacity - 1} versions, capped at {level:g}"


def in_flight_lags(start_lags: jax.Array, length: int) -> jax.Array:
    """Per-step lags `[length, E]` of rollouts whose behaviour policy is updated mid-rollout.

    An environment starts `start_lags` versions behind and catches up to the newest version by
    the end of the rollout, as if the learner published a new version every
    `length / (start_lag + 1)` steps (PipelineRL): the lag at step `t` is
    `start_lags - floor(t (start_lags + 1) / length)`, never below 0. Generic over testbeds.
    """
    steps = jnp.arange(length, dtype=jnp.int32)[:, None]
    caught_up = (steps * (start_lags[None, :] + 1)) // length
    return jnp.maximum(start_lags[None, :] - caught_up, 0).astype(jnp.int32)


def refuse_stale(lags: jax.Array, max_lag: jax.Array) -> tuple[jax.Array, jax.Array]:
    """ROLL Flash's freshness bound, applied where a batch is collected: a generation whose
    oldest step is more than `max_lag` versions behind (`lags` `[generations, steps]`, a
    float `max_lag` admitting `floor(max_lag)`) is refused, and another takes its place.

    ROLL's `get_batch` fills a batch from the oldest admitted version first, so the refill is
    a generation of that version: lags capped at `floor(max_lag)`. Returns the lags of the
    collected batch and, per generation, 1.0 where it replaced a refused one.
    """
    bound = jnp.floor(max_lag).astype(lags.dtype)
    refused = lags.max(axis=-1) > bound
    return jnp.minimum(lags, bound), refused.astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class InFlight(Uniform):
    """Weights change during the rollout: an environment starts a lag uniform over `{0..lag}`
    behind, as `uniform` draws it, and catches up to the newest version (`in_flight_lags`)."""

    name: ClassVar[str] = "in_flight"
    changes_mid_rollout: ClassVar[bool] = True

    def draw(self, key: jax.Array, lag: jax.Array, buffer: PolicyBuffer,
             per_actor_lags: jax.Array, warmup: str, length: int) -> jax.Array:
        return in_flight_lags(super().draw(key, lag, buffer, per_actor_lags, warmup, length),
                              length)

    def expected_lag(self, level: int, length: int, counted_steps: int) -> float:
        """The mean of `max(s - floor(t (s + 1) / length), 0)` over the start lags `s`,
        uniform over `{0..level}`, and the counted steps `t`."""
        lags = in_flight_lags(jnp.arange(int(level) + 1, dtype=jnp.int32), length)
        return float(np.mean(np.asarray(lags)[:counted_steps]))

    def meaning(self, level: float, capacity: int) -> str:
        return (f"weights change while acting: start lags uniform over 0..{level:g} versions, "
                f"catching up to the newest")


@dataclasses.dataclass(frozen=True)
class Empirical(RandomLagModel):
    """`P(j) = probabilities[j]`, a histogram measured elsewhere (the level is unused)."""

    name: ClassVar[str] = "empirical"
    takes_probabilities: ClassVar[bool] = True

    probabilities: tuple[float, ...] = ()

    @classmethod
    def from_probabilities(cls, probabilities: Any = ()) -> Empirical:
        return cls(probabilities)

    @classmethod
    def from_parameter(cls, text: str) -> tuple[Empirical, float]:
        return cls(tuple(float(p) for p in text.split(","))), 0.0

    def record(self) -> dict[str, Any]:
        return {"lag_model": self.name, "lag_probabilities": self.probabilities}

    def log_probs(self, lag, capacity):
        return jnp.log(jnp.asarray(self.probabilities, jnp.float32))

    def check(self, capacity: int) -> None:
        probs = self.probabilities
        if not isinstance(probs, tuple) or not probs or any(
                isinstance(p, bool) or not isinstance(p, (int, float)) for p in probs):
            raise ValueError(f"lag_probabilities must be a non-empty tuple of numbers (P(lag = j) "
                             f"for j = 0..len-1) for lag_model='empirical', got {probs!r}")
        values = np.asarray(probs, np.float64)
        if len(values) > capacity:
            raise ValueError(f"lag_probabilities has {len(values)} entries; at most "
                             f"buffer_capacity={capacity} (lags 0..{capacity - 1})")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"lag_probabilities must be finite and >= 0, got {list(probs)}")
        if abs(values.sum() - 1.0) > 1e-6:
            raise ValueError(f"lag_probabilities must sum to 1 (within 1e-6), got sum "
                             f"{values.sum():.8g} for {list(probs)}")

    def check_level(self, lag: Any, capacity: int) -> None:
        del lag, capacity  # the lags come from the probabilities

    def describe(self, level: float, capacity: int) -> str:
        return f"{self.name} ({self.meaning(level, capacity)})"

    def meaning(self, level: float, capacity: int) -> str:
        return "P(lag = 0, 1, ...) = " + ", ".join(f"{p:g}" for p in self.probabilities)


LAG = Knob("lag", 0.0, "the lag model's parameter (versions behind, a bound or a probability)")
"""The knob every run of every testbed reads, checked by its lag model (`LagModel.check_level`):
the (maximum) number of versions a behaviour policy lags behind for `fixed`, `uniform`,
`per_actor` and (at the start of a rollout) `in_flight`, the staleness bound `eta` for `bounded`,
the success probability `p` of the truncated geometric distribution for `geometric`, unused for
`empirical`."""

LAG_MODELS: dict[str, type[LagModel]] = {
    kind.name: kind for kind in (Fixed, Uniform, Geometric, PerActor, Bounded, InFlight, Empirical)}
"""Each lag model by the name the command line, experiment files and config records use."""


def named(name: Any, probabilities: Any = ()) -> LagModel:
    """The lag model of a config record: `lag_model` and its `lag_probabilities`."""
    if not isinstance(name, str) or name not in LAG_MODELS:
        raise ValueError(f"lag_model={name!r} is not supported; allowed values: "
                         f"{', '.join(LAG_MODELS)}")
    return LAG_MODELS[name].from_probabilities(probabilities)
