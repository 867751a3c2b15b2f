"""The testbeds the shared driver, sweeps and reports run: a run is (testbed, config, hparams,
seed).

A testbed contributes its config and hyper-parameter classes, their validation, a trainer
(`vaco_jax.core.trainer.Trainer`: `init`, `collect`, `update`, `evaluated`, `evaluate`, `run`,
the same signatures on every testbed, typed by the testbed's config, hyper-parameters, run state
and evaluated policy, as its `Testbed[Config, HParams, State, Policy]` is) and the names of its metrics; everything else (chunked runs,
checkpoints, resume, sweeps, statistics, figures) is shared and speaks of scores. A testbed
whose metrics include `diverged` (0/1 per update) has its diverged runs reported.

Each config names its testbed (`Config.testbed`), so the layers above find a run's testbed
forward, `named(config.testbed)`, and the registry sits just above the two testbeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any, Callable, Generic

from vaco_jax.control import envs
from vaco_jax.control import train as control_train
from vaco_jax.control.algorithms import ALGORITHMS
from vaco_jax.control import config as control_config
from vaco_jax.control.config import ControlConfig, ControlHParams
from vaco_jax.control.config import validate as validate_control
from vaco_jax.control.networks import Policy
from vaco_jax.core.trainer import ConfigT, HParamsT, PolicyT, StateT, Trainer
from vaco_jax.tokens import config as token_config
from vaco_jax.tokens.algorithms import ALGORITHMS as TOKEN_ALGORITHMS
from vaco_jax.tokens import train as token_train
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.model import Params
from vaco_jax.tokens.tasks import TASKS


@dataclasses.dataclass(frozen=True)
class Reference:
    """A score that gives a run's scores their scale, and what it is."""

    score: float
    meaning: str  # e.g. "maximum (reward at most 1 per step)"


def _control_reference(config: ControlConfig) -> Reference | None:
    """The task's registered reference, at the task's own episode length only (another time
    limit changes what a return can reach)."""
    task = envs.task(config.env)
    if task.reference_score is None or config.episode_length != task.episode_length:
        return None
    return Reference(task.reference_score, task.reference)


def _control_task_defaults(env: str) -> dict[str, Any]:
    """A task's own time limit, which differs between tasks (CartPole-v1: 500 steps)."""
    return {"episode_length": envs.task(env).episode_length}


@dataclasses.dataclass(frozen=True)
class Testbed(Generic[ConfigT, HParamsT, StateT, PolicyT]):
    """One testbed as the driver, sweeps and reports see it: its config, hyper-parameter and
    run-state classes, and what is said of its runs."""

    config: type[ConfigT]  # names the testbed (`Config.testbed`)
    hparams: type[HParamsT]  # a flax struct of float leaves with `create(**values)`
    state: type[StateT]  # one run's state, what the trainer's `init` returns
    validate: Callable[[ConfigT, HParamsT | None], None]  # raises before compiling
    trainer: type[Trainer[ConfigT, HParamsT, StateT, PolicyT]]  # built from a config
    metrics: tuple[str, ...]
    score_name: str  # the score in a report's words
    steps_name: str  # what `steps_per_update` counts
    task_field: str  # the config field a sweep's `tasks` set
    tasks: Callable[[], tuple[str, ...]]  # the task names (the control registry grows)
    algorithms: Callable[[], tuple[str, ...]]  # the registry's names, plugins' included
    # The plugin entry point that registered an algorithm, described; None for a built-in.
    registered_by: Callable[[str], str | None]
    # The stabilisers (`phase.MECHANISM_FRACTIONS`) an algorithm records; KeyError if unknown.
    mechanisms: Callable[[str], frozenset[str]]
    # The hyper-parameters a configured run reads (`vaco_jax.core.knobs`): a setting of another
    # is refused, since it would change nothing.
    knobs: Callable[[ConfigT], frozenset[str]]
    # Config values a task brings unless an experiment sets them.
    task_defaults: Callable[[str], dict[str, Any]]
    # `(algo, values, pinned) -> values`: the config values an algorithm's authors run it at,
    # over a run's `values` but those `pinned` for the algorithm itself.
    algorithm_setting: Callable[[str, Mapping[str, Any], Collection[str]], dict[str, Any]]
    reference: Callable[[ConfigT], Reference | None]  # of a config's score, where one is known

    @property
    def name(self) -> str:
        return self.config.testbed

    @property
    def score(self) -> str:
        """The metric that evaluates the learner, scored by reports."""
        return self.trainer.score

    @property
    def training_metrics(self) -> tuple[str, ...]:
        """The per-update metrics a sweep's runs table averages over each evaluation period."""
        return tuple(m for m in self.metrics if m not in ("env_steps", self.score, "diverged"))

    def task(self, config: ConfigT) -> str:
        return getattr(config, self.task_field)


CONTROL: Testbed[ControlConfig, ControlHParams, control_train.ControlState, Policy] = Testbed(
    config=ControlConfig, hparams=ControlHParams, state=control_train.ControlState, validate=validate_control,
    trainer=control_train.ControlTrainer, metrics=control_train.METRICS, score_name="return",
    steps_name="environment steps", task_field="env", tasks=envs.names,
    algorithms=lambda: tuple(ALGORITHMS), registered_by=ALGORITHMS.registered_by,
    mechanisms=control_train.algorithm_mechanisms, knobs=control_config.knobs,
    task_defaults=_control_task_defaults,
    algorithm_setting=lambda algo, values, pinned: {},
    reference=_control_reference)
TOKENS: Testbed[TokenConfig, TokenHParams, token_train.TokenState, Params] = Testbed(
    config=TokenConfig, hparams=TokenHParams, state=token_train.TokenState, validate=token_config.validate,
    trainer=token_train.TokenTrainer, metrics=token_train.METRICS, score_name="held-out accuracy",
    steps_name="sampled responses", task_field="task", tasks=lambda: tuple(TASKS),
    algorithms=lambda: tuple(TOKEN_ALGORITHMS), registered_by=TOKEN_ALGORITHMS.registered_by,
    mechanisms=token_train.algorithm_mechanisms, knobs=token_config.knobs,
    task_defaults=lambda task: {}, algorithm_setting=token_config.algorithm_setting,
    reference=lambda config: Reference(1.0, "maximum (every held-out answer exact)"))
AnyTestbed = Testbed[Any, Any, Any, Any]
"""A testbed of the registry, whichever: the layers above read a run's testbed off its config."""

TESTBEDS: dict[str, AnyTestbed] = {t.name: t for t in (CONTROL, TOKENS)}


def named(name: str) -> AnyTestbed:
    """The testbed called `name`: a config's (`config.testbed`) or a saved run's."""
    if name not in TESTBEDS:
        raise ValueError(f"testbed={name!r} is not supported; allowed values: "
                         f"{', '.join(TESTBEDS)}")
    return TESTBEDS[name]
