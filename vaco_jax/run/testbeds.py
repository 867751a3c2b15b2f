"""The testbeds the shared driver, sweeps and reports run: a run is (testbed, config, hparams,
seed).

A testbed contributes its config and hyper-parameter classes, their validation, a trainer and
the names of its metrics; everything else (chunked runs, checkpoints, resume, sweeps,
statistics, figures) is shared. A trainer is built from a validated config and exposes
`init(key, hp) -> state` and `run(state, hp, num_periods) -> (state, metrics)`, the metrics
per-update scalars stacked over `num_periods x updates_per_period` updates, the score metric
NaN except at the last update of each period. A testbed whose metrics include `diverged`
(0/1 per update) has its diverged runs reported.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import jax

from vaco_jax.control import envs
from vaco_jax.control.algorithms import ALGORITHMS
from vaco_jax.control.config import Config, ControlHParams, ControlConfig
from vaco_jax.control.config import validate as validate_control
from vaco_jax.tokens import config as token_config
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.tasks import TASKS
from vaco_jax.tokens.train import METRICS as TOKEN_METRICS
from vaco_jax.tokens.train import TokenState, TokenTrainer
from vaco_jax.control.train import METRICS, ControlTrainer, ControlState


class TestbedTrainer(Protocol):
    """What the driver calls on a testbed's trainer (both vmapped over runs)."""

    def init(self, key: jax.Array, hp: Any) -> Any: ...

    def run(self, state: Any, hp: Any, num_periods: int) -> tuple[Any, dict[str, jax.Array]]: ...


@dataclasses.dataclass(frozen=True)
class Testbed:
    """One testbed as the driver, sweeps and reports see it."""

    name: str
    config: type[Config]
    hparams: type  # a flax struct of float leaves with `create(**values)`
    validate: Callable[[Any, Any], None]  # (config, hparams or None); raises before compiling
    trainer: Callable[[Any], TestbedTrainer]  # of a validated config
    evaluate: Callable[[Any, Any, jax.Array], jax.Array]  # (trainer, state, key) -> score
    # (trainer, state, key, hp) -> the data one update collects; sizes a run's memory
    collect: Callable[[Any, Any, jax.Array, Any], Any]
    metrics: tuple[str, ...]
    score: str  # the metric that evaluates the learner, scored by reports
    score_name: str  # the score in a report's words
    steps_name: str  # what `steps_per_update` counts
    task_field: str  # the config field a sweep's `tasks` set
    tasks: tuple[str, ...]
    algorithms: tuple[str, ...]

    @property
    def training_metrics(self) -> tuple[str, ...]:
        """The per-update metrics a sweep's runs table averages over each evaluation period."""
        return tuple(m for m in self.metrics if m not in ("env_steps", self.score, "diverged"))

    def task(self, config: Config) -> str:
        return getattr(config, self.task_field)


def _rollout(trainer: ControlTrainer, state: ControlState, key: jax.Array, hp: ControlHParams) -> Any:
    return trainer.collect(state, key, hp)[1]


def _held_out_accuracy(trainer: TokenTrainer, state: TokenState, key: jax.Array) -> jax.Array:
    del key  # greedy decoding of fixed prompts draws nothing
    return trainer.evaluate(state.params)


CONTROL = Testbed(
    name="control", config=ControlConfig, hparams=ControlHParams, validate=validate_control,
    trainer=ControlTrainer, evaluate=ControlTrainer.evaluate, collect=_rollout, metrics=METRICS,
    score="eval_return", score_name="return", steps_name="environment steps", task_field="env",
    tasks=envs.ENV_NAMES, algorithms=tuple(ALGORITHMS))
TOKENS = Testbed(
    name="tokens", config=TokenConfig, hparams=TokenHParams, validate=token_config.validate,
    trainer=TokenTrainer, evaluate=_held_out_accuracy, collect=TokenTrainer.generate,
    metrics=TOKEN_METRICS, score="eval_accuracy", score_name="held-out accuracy",
    steps_name="sampled responses", task_field="task", tasks=TASKS,
    algorithms=token_config.ALGORITHMS)
TESTBEDS = {t.name: t for t in (CONTROL, TOKENS)}


def of_config(config: Config) -> Testbed:
    """The testbed whose config `config` is."""
    for testbed in TESTBEDS.values():
        if type(config) is testbed.config:
            return testbed
    raise TypeError(f"{type(config).__name__} is not the config of a testbed; allowed: "
                    f"{', '.join(t.config.__name__ for t in TESTBEDS.values())}")


def named(name: str) -> Testbed:
    if name not in TESTBEDS:
        raise ValueError(f"testbed={name!r} is not supported; allowed values: "
                         f"{', '.join(TESTBEDS)}")
    return TESTBEDS[name]
